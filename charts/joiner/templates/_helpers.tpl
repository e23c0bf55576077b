{{/* The release's resource names and common labels. */}}
{{- define "joiner.fullname" -}}
{{- if contains "joiner" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-joiner" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "joiner.labels" -}}
app.kubernetes.io/name: joiner
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "joiner.selectorLabels" -}}
app.kubernetes.io/name: joiner
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
