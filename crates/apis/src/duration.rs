//! Go-style duration strings ("10m", "1h30m", "720h") as budgets and schedules write them.
//!
//! Karpenter manifests use Go's `time.ParseDuration` syntax; reading the same syntax keeps those
//! manifests valid here. Only whole seconds matter for disruption windows, so sub-second units
//! are accepted and rounded up.

/// Parses a Go duration into whole seconds (rounded up). `None` for anything malformed or
/// negative, so callers can attach the field path to their own error.
pub fn parse_seconds(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s == "0" {
        return Some(0);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let per_unit: u128 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        nanos = nanos.checked_add(scaled(num, per_unit)?)?;
        rest = next;
    }
    let secs = nanos.div_ceil(1_000_000_000);
    u64::try_from(secs).ok()
}

/// `num` (a decimal such as "1.5") times `per_unit`, rounded up.
fn scaled(num: &str, per_unit: u128) -> Option<u128> {
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') || int.len() + frac.len() > 24 {
        return None;
    }
    let int_v: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut total = int_v.checked_mul(per_unit)?;
    if !frac.is_empty() {
        let frac_v: u128 = frac.parse().ok()?;
        let denom = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
        total = total.checked_add(frac_v.checked_mul(per_unit)?.div_ceil(denom))?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::parse_seconds;

    #[test]
    fn go_durations() {
        assert_eq!(parse_seconds("10s"), Some(10));
        assert_eq!(parse_seconds("1h30m"), Some(5400));
        assert_eq!(parse_seconds("720h"), Some(720 * 3600));
        assert_eq!(parse_seconds("1.5m"), Some(90));
        assert_eq!(parse_seconds("500ms"), Some(1));
        assert_eq!(parse_seconds("0"), Some(0));
        for bad in ["", "10", "1d", "-5m", "h", "1..5s", "abc"] {
            assert_eq!(parse_seconds(bad), None, "{bad}");
        }
    }
}
