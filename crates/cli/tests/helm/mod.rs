//! A renderer for the subset of Helm's Go templates the joiner chart uses, for tests: Helm
//! itself is not served by a registry this project reaches (see the README). It follows Go's
//! text/template and Helm's rules for that subset — `{{-`/`-}}` trimming, comments, `define`,
//! `if`/`with`/`else`/`end`, pipelines, and the functions `include`, `quote`, `default`,
//! `required`, `nindent`, `indent`, `toYaml`, `trunc`, `trimSuffix`, `contains`, `printf`,
//! `not` — and is strict as `helm template --strict`: a `.Values` path that does not exist is
//! an error, as is any construct outside the subset, so a template change that needs more
//! fails loudly instead of rendering wrongly.

use std::collections::BTreeMap;

use serde_json::{json, Value};

#[derive(Debug, Clone)]
enum Node {
    Text(String),
    Expr(String),
    If(String, Vec<Node>, Vec<Node>),
    With(String, Vec<Node>, Vec<Node>),
}

/// Text and actions, with trim markers applied and comments removed.
fn lex(src: &str) -> Result<Vec<(bool, String)>, String> {
    let mut out: Vec<(bool, String)> = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let mut text = rest[..start].to_string();
        if trim_next {
            text = text.trim_start().to_string();
        }
        let after = &rest[start + 2..];
        let trim_before = after.starts_with("- ");
        if trim_before {
            text = text.trim_end().to_string();
        }
        out.push((false, text));
        let end = after.find("}}").ok_or("unclosed {{")?;
        let mut action = &after[..end];
        trim_next = action.ends_with(" -");
        if trim_before {
            action = &action[2..];
        }
        if trim_next {
            action = &action[..action.len() - 2];
        }
        let action = action.trim();
        if !(action.starts_with("/*") && action.ends_with("*/")) {
            out.push((true, action.to_string()));
        }
        rest = &after[end + 2..];
    }
    let mut text = rest.to_string();
    if trim_next {
        text = text.trim_start().to_string();
    }
    out.push((false, text));
    Ok(out)
}

/// Parses tokens into nodes until `end`/`else` (returned as the terminator).
fn parse(
    tokens: &[(bool, String)],
    pos: &mut usize,
    defines: &mut BTreeMap<String, Vec<Node>>,
) -> Result<(Vec<Node>, Option<String>), String> {
    let mut nodes = Vec::new();
    while *pos < tokens.len() {
        let (is_action, text) = &tokens[*pos];
        *pos += 1;
        if !is_action {
            if !text.is_empty() {
                nodes.push(Node::Text(text.clone()));
            }
            continue;
        }
        let word = text.split_whitespace().next().unwrap_or("");
        match word {
            "end" | "else" => return Ok((nodes, Some(text.clone()))),
            "if" | "with" => {
                let pipeline = text[word.len()..].trim().to_string();
                let (body, term) = parse(tokens, pos, defines)?;
                let otherwise = match term.as_deref() {
                    Some("else") => {
                        let (e, term) = parse(tokens, pos, defines)?;
                        if term.as_deref() != Some("end") {
                            return Err(format!("{word}: else without end ({term:?})"));
                        }
                        e
                    }
                    Some("end") => Vec::new(),
                    other => {
                        return Err(format!(
                            "{word} {pipeline}: unsupported terminator {other:?}"
                        ))
                    }
                };
                nodes.push(if word == "if" {
                    Node::If(pipeline, body, otherwise)
                } else {
                    Node::With(pipeline, body, otherwise)
                });
            }
            "define" => {
                let name = text[6..].trim().trim_matches('"').to_string();
                let (body, term) = parse(tokens, pos, defines)?;
                if term.as_deref() != Some("end") {
                    return Err(format!("define {name}: no end"));
                }
                defines.insert(name, body);
            }
            "range" | "template" | "block" => return Err(format!("{word} is outside the subset")),
            _ => nodes.push(Node::Expr(text.clone())),
        }
    }
    Ok((nodes, None))
}

/// A chart's templates, parsed.
pub struct Chart {
    templates: Vec<(String, Vec<Node>)>,
    defines: BTreeMap<String, Vec<Node>>,
}

impl Chart {
    /// Parses `(file name, source)` pairs; files starting with `_` only define.
    pub fn parse(files: &[(String, String)]) -> Result<Chart, String> {
        let mut defines = BTreeMap::new();
        let mut templates = Vec::new();
        for (name, src) in files {
            let tokens = lex(src).map_err(|e| format!("{name}: {e}"))?;
            let mut pos = 0;
            let (nodes, term) =
                parse(&tokens, &mut pos, &mut defines).map_err(|e| format!("{name}: {e}"))?;
            if let Some(t) = term {
                return Err(format!("{name}: unexpected {t}"));
            }
            if !name.starts_with('_') {
                templates.push((name.clone(), nodes));
            }
        }
        Ok(Chart { templates, defines })
    }

    /// Renders every template with `root` (`{"Values", "Release", "Chart"}`) as `.`.
    pub fn render(&self, root: &Value) -> Result<Vec<(String, String)>, String> {
        let r = Renderer { chart: self, root };
        self.templates
            .iter()
            .map(|(name, nodes)| {
                r.nodes(nodes, root)
                    .map(|s| (name.clone(), s))
                    .map_err(|e| format!("{name}: {e}"))
            })
            .collect()
    }
}

struct Renderer<'a> {
    chart: &'a Chart,
    root: &'a Value,
}

/// Go template truth (and Helm's `empty`, negated).
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// How a value prints in a template.
fn print(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
            _ => n.to_string(),
        },
        Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

/// Splits on `sep` outside double quotes.
fn split_outside_quotes(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut quoted = false;
    let mut escaped = false;
    for c in s.chars() {
        if quoted && c == '\\' && !escaped {
            escaped = true;
            parts.last_mut().expect("part").push(c);
            continue;
        }
        if c == '"' && !escaped {
            quoted = !quoted;
        }
        escaped = false;
        if c == sep && !quoted {
            parts.push(String::new());
        } else {
            parts.last_mut().expect("part").push(c);
        }
    }
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

impl Renderer<'_> {
    fn nodes(&self, nodes: &[Node], dot: &Value) -> Result<String, String> {
        let mut out = String::new();
        for n in nodes {
            match n {
                Node::Text(t) => out.push_str(t),
                Node::Expr(e) => out.push_str(&print(&self.pipeline(e, dot)?)),
                Node::If(p, then, otherwise) => {
                    let v = self.pipeline(p, dot)?;
                    out.push_str(&self.nodes(if truthy(&v) { then } else { otherwise }, dot)?);
                }
                Node::With(p, then, otherwise) => {
                    let v = self.pipeline(p, dot)?;
                    if truthy(&v) {
                        out.push_str(&self.nodes(then, &v)?);
                    } else {
                        out.push_str(&self.nodes(otherwise, dot)?);
                    }
                }
            }
        }
        Ok(out)
    }

    fn pipeline(&self, text: &str, dot: &Value) -> Result<Value, String> {
        let mut value: Option<Value> = None;
        for command in split_outside_quotes(text, '|') {
            let words = split_outside_quotes(&command, ' ');
            let first = words.first().ok_or("empty command")?;
            let is_function = first
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
                && !matches!(first.as_str(), "true" | "false" | "nil");
            if !is_function {
                if words.len() > 1 || value.is_some() {
                    return Err(format!("{command}: not a function"));
                }
                value = Some(self.term(first, dot)?);
                continue;
            }
            let mut args = words[1..]
                .iter()
                .map(|w| self.term(w, dot))
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(v) = value.take() {
                args.push(v);
            }
            value = Some(self.call(first, &args, dot)?);
        }
        value.ok_or_else(|| format!("{text}: empty pipeline"))
    }

    fn term(&self, word: &str, dot: &Value) -> Result<Value, String> {
        if let Some(s) = word.strip_prefix('"').and_then(|w| w.strip_suffix('"')) {
            return serde_json::from_str::<String>(&format!("\"{s}\""))
                .map(Value::String)
                .map_err(|e| format!("{word}: {e}"));
        }
        if word == "." {
            return Ok(dot.clone());
        }
        if let Ok(n) = word.parse::<i64>() {
            return Ok(json!(n));
        }
        let (base, path) = match word.strip_prefix("$") {
            Some(p) => (self.root, p),
            None => (dot, word),
        };
        let path = path
            .strip_prefix('.')
            .ok_or_else(|| format!("{word}: unsupported term"))?;
        let mut v = base;
        for (i, key) in path.split('.').enumerate() {
            v = v.get(key).ok_or_else(|| {
                format!(
                    "{word}: no {} (strict: every value read must exist)",
                    path.split('.').take(i + 1).collect::<Vec<_>>().join(".")
                )
            })?;
        }
        Ok(v.clone())
    }

    fn call(&self, name: &str, args: &[Value], dot: &Value) -> Result<Value, String> {
        let _ = dot;
        let arity = |n: usize| {
            if args.len() == n {
                Ok(())
            } else {
                Err(format!("{name} takes {n} arguments, got {}", args.len()))
            }
        };
        let int = |v: &Value| {
            v.as_f64()
                .map(|f| f as i64)
                .ok_or_else(|| format!("{name}: {v} is not a number"))
        };
        Ok(match name {
            "include" => {
                arity(2)?;
                let define = args[0].as_str().ok_or("include: name")?;
                let body = self
                    .chart
                    .defines
                    .get(define)
                    .ok_or_else(|| format!("include: no define {define}"))?;
                Value::String(self.nodes(body, &args[1])?)
            }
            "quote" => {
                arity(1)?;
                Value::String(serde_json::to_string(&print(&args[0])).map_err(|e| e.to_string())?)
            }
            "default" => {
                arity(2)?;
                if truthy(&args[1]) {
                    args[1].clone()
                } else {
                    args[0].clone()
                }
            }
            "required" => {
                arity(2)?;
                if args[1].is_null() || args[1].as_str() == Some("") {
                    return Err(format!("required: {}", print(&args[0])));
                }
                args[1].clone()
            }
            "nindent" | "indent" => {
                arity(2)?;
                let pad = " ".repeat(usize::try_from(int(&args[0])?).map_err(|e| e.to_string())?);
                let text = print(&args[1]);
                let body = text
                    .lines()
                    .map(|l| format!("{pad}{l}"))
                    .collect::<Vec<_>>()
                    .join("\n");
                Value::String(if name == "nindent" {
                    format!("\n{body}")
                } else {
                    body
                })
            }
            "toYaml" => {
                arity(1)?;
                let y = serde_yaml::to_string(&args[0]).map_err(|e| e.to_string())?;
                Value::String(y.trim_end_matches('\n').to_string())
            }
            "trunc" => {
                arity(2)?;
                let n = usize::try_from(int(&args[0])?).map_err(|e| e.to_string())?;
                Value::String(print(&args[1]).chars().take(n).collect())
            }
            "trimSuffix" => {
                arity(2)?;
                let s = print(&args[1]);
                let suffix = print(&args[0]);
                Value::String(s.strip_suffix(suffix.as_str()).unwrap_or(&s).to_string())
            }
            "contains" => {
                arity(2)?;
                Value::Bool(print(&args[1]).contains(&print(&args[0])))
            }
            "not" => {
                arity(1)?;
                Value::Bool(!truthy(&args[0]))
            }
            "printf" => {
                let fmt = args
                    .first()
                    .and_then(Value::as_str)
                    .ok_or("printf: format")?;
                let mut out = String::new();
                let mut rest = args[1..].iter();
                let mut chars = fmt.chars().peekable();
                while let Some(c) = chars.next() {
                    if c == '%' {
                        match chars.next() {
                            Some('s' | 'v' | 'd') => out
                                .push_str(&print(rest.next().ok_or("printf: too few arguments")?)),
                            Some('%') => out.push('%'),
                            other => {
                                return Err(format!("printf: verb {other:?} outside the subset"))
                            }
                        }
                    } else {
                        out.push(c);
                    }
                }
                Value::String(out)
            }
            other => return Err(format!("function {other} is outside the subset")),
        })
    }
}

/// Deep-merges `over` into `base` (maps merge, anything else replaces), as `helm -f` does.
pub fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, values: Value) -> Result<String, String> {
        let chart = Chart::parse(&[
            (
                "_h.tpl".into(),
                "{{- define \"n\" -}}\nx: {{ .a }}\n{{- end -}}".into(),
            ),
            ("t.yaml".into(), src.into()),
        ])?;
        let out = chart.render(&json!({"Values": values, "Release": {"Name": "r"}}))?;
        Ok(out[0].1.clone())
    }

    #[test]
    fn the_subset_renders_as_go_templates_do() {
        assert_eq!(
            render("a: {{ .Values.a | quote }}", json!({"a": 2})).as_deref(),
            Ok("a: \"2\"")
        );
        assert_eq!(
            render(
                "m:\n  {{- include \"n\" .Values | nindent 2 }}\nz: 1",
                json!({"a": "b"})
            )
            .as_deref(),
            Ok("m:\n  x: b\nz: 1")
        );
        assert_eq!(
            render(
                "{{- with .Values.l }}\nl:\n  {{- toYaml . | nindent 2 }}\n{{- end }}\n",
                json!({"l": [1]})
            )
            .as_deref(),
            Ok("\nl:\n  - 1\n")
        );
        assert_eq!(
            render(
                "{{- with .Values.l }}\nl: x\n{{- end }}\n",
                json!({"l": []})
            )
            .as_deref(),
            Ok("\n")
        );
        assert_eq!(
            render("{{ .Values.t | default \"d\" }}", json!({"t": ""})).as_deref(),
            Ok("d")
        );
        assert_eq!(
            render("{{ printf \"%s-j\" .Release.Name | trunc 3 }}", json!({})).as_deref(),
            Ok("r-j")
        );
        assert_eq!(
            render(
                "{{ if contains \"j\" .Release.Name }}y{{ else }}n{{ end }}",
                json!({})
            )
            .as_deref(),
            Ok("n")
        );
        assert!(
            render("{{ .Values.missing }}", json!({})).is_err(),
            "strict"
        );
        assert!(render("{{ required \"need a\" .Values.a }}", json!({"a": ""})).is_err());
        assert!(
            render("{{ range .Values.a }}{{ end }}", json!({"a": []})).is_err(),
            "outside the subset"
        );
    }
}
