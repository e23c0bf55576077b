//! Kubernetes quantity strings ("500m", "1.5Gi", "2e3") turned into integer units.
//!
//! Fit checks must never use floats, so every quantity becomes an integer in the unit the model
//! keeps for it: millicores for cpu, bytes (or plain counts) for everything else. Values are
//! rounded up, as the kube-scheduler does, so a request is never under-counted.

use crate::error::QuantityError;

/// Parses a quantity and returns it scaled by 1000 (milli-units), rounded up.
pub fn parse_milli(s: &str) -> Result<i64, QuantityError> {
    parse_scaled(s, 1000)
}

/// Parses a quantity into whole units (bytes, counts), rounded up.
pub fn parse_units(s: &str) -> Result<i64, QuantityError> {
    parse_scaled(s, 1)
}

fn parse_scaled(s: &str, factor: i128) -> Result<i64, QuantityError> {
    let (num, scale) = split(s)?;
    // num is a decimal string; value = num * scale * 1000
    let (mantissa, frac_digits) = decimal(num, s)?;
    // value*1000 = mantissa * scale * 1000 / 10^frac_digits
    let scaled = mantissa
        .checked_mul(scale.numer)
        .and_then(|v| v.checked_mul(factor))
        .ok_or_else(|| QuantityError::Overflow(s.to_string()))?;
    let denom = 10i128
        .checked_pow(frac_digits)
        .and_then(|d| d.checked_mul(scale.denom))
        .ok_or_else(|| QuantityError::Overflow(s.to_string()))?;
    let v = div_ceil(scaled, denom);
    i64::try_from(v).map_err(|_| QuantityError::Overflow(s.to_string()))
}

/// Formats millicores the way people write them ("250m", "2").
pub fn format_cpu(millis: i64) -> String {
    if millis % 1000 == 0 {
        format!("{}", millis / 1000)
    } else {
        format!("{millis}m")
    }
}

/// A decimal with at most `places` decimals, trailing zeros dropped ("1.5", "382.97", "16").
fn trimmed(v: f64, places: usize) -> String {
    let s = format!("{v:.places$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Millicores in cores, as people read them in messages: "0.25 cpu cores", "1 cpu core",
/// "382.97 cpu cores".
pub fn human_cpu(millis: i64) -> String {
    let cores = trimmed(millis as f64 / 1000.0, 3);
    let unit = if cores == "1" { "core" } else { "cores" };
    format!("{cores} cpu {unit}")
}

/// Bytes for people: GiB from one GiB up (node memory is thought of in GiB, "1.5 GiB",
/// "3000 GiB"), MiB or KiB below, with up to two decimals.
pub fn human_bytes(bytes: i64) -> String {
    const UNITS: [(&str, i64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes.abs() >= size {
            return format!("{} {unit}", trimmed(bytes as f64 / size as f64, 2));
        }
    }
    format!("{bytes} bytes")
}

/// Formats bytes with the largest binary suffix that keeps the value whole ("6903Mi").
pub fn format_bytes(bytes: i64) -> String {
    const UNITS: [(&str, i64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (suffix, size) in UNITS {
        if bytes != 0 && bytes % size == 0 {
            return format!("{}{suffix}", bytes / size);
        }
    }
    format!("{bytes}")
}

struct Scale {
    numer: i128,
    denom: i128,
}

fn split(s: &str) -> Result<(&str, Scale), QuantityError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(QuantityError::Empty);
    }
    let bin = |p: u32| Scale {
        numer: 1i128 << p,
        denom: 1,
    };
    let dec = |e: u32| Scale {
        numer: 10i128.pow(e),
        denom: 1,
    };
    let suffixes: [(&str, Scale); 13] = [
        ("Ki", bin(10)),
        ("Mi", bin(20)),
        ("Gi", bin(30)),
        ("Ti", bin(40)),
        ("Pi", bin(50)),
        ("Ei", bin(60)),
        (
            "n",
            Scale {
                numer: 1,
                denom: 1_000_000_000,
            },
        ),
        (
            "u",
            Scale {
                numer: 1,
                denom: 1_000_000,
            },
        ),
        (
            "m",
            Scale {
                numer: 1,
                denom: 1000,
            },
        ),
        ("k", dec(3)),
        ("M", dec(6)),
        ("G", dec(9)),
        ("T", dec(12)),
    ];
    for (suf, scale) in suffixes {
        if let Some(num) = t.strip_suffix(suf) {
            return Ok((num, scale));
        }
    }
    if let Some(num) = t.strip_suffix('P') {
        return Ok((num, dec(15)));
    }
    if let Some(num) = t.strip_suffix('E') {
        // "1E" is exa, but "1e3" is an exponent; an exponent always has digits after the e.
        return Ok((num, dec(18)));
    }
    if let Some(pos) = t.find(['e', 'E']) {
        let (num, exp) = t.split_at(pos);
        let exp: i32 = exp[1..]
            .parse()
            .map_err(|_| QuantityError::Invalid(s.to_string()))?;
        if !(-18..=18).contains(&exp) {
            return Err(QuantityError::Overflow(s.to_string()));
        }
        let scale = if exp >= 0 {
            dec(exp as u32)
        } else {
            Scale {
                numer: 1,
                denom: 10i128.pow((-exp) as u32),
            }
        };
        return Ok((num, scale));
    }
    Ok((t, Scale { numer: 1, denom: 1 }))
}

fn decimal(num: &str, whole: &str) -> Result<(i128, u32), QuantityError> {
    let invalid = || QuantityError::Invalid(whole.to_string());
    let num = num.strip_prefix('+').unwrap_or(num);
    if num.starts_with('-') {
        return Err(QuantityError::Negative(whole.to_string()));
    }
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if int.is_empty() && frac.is_empty() {
        return Err(invalid());
    }
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    if int.len() + frac.len() > 30 {
        return Err(QuantityError::Overflow(whole.to_string()));
    }
    let digits = format!("{int}{frac}");
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| invalid())?
    };
    Ok((mantissa, frac.len() as u32))
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 {
        q + 1
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_cpu(1000), "1 cpu core");
        assert_eq!(human_cpu(250), "0.25 cpu cores");
        assert_eq!(human_cpu(382_970), "382.97 cpu cores");
        assert_eq!(human_cpu(1_500_000), "1500 cpu cores");
        assert_eq!(human_bytes(3 << 30), "3 GiB");
        assert_eq!(human_bytes(3000 << 30), "3000 GiB");
        assert_eq!(human_bytes((1 << 30) + (1 << 29)), "1.5 GiB");
        assert_eq!(human_bytes(6903 << 20), "6.74 GiB");
        assert_eq!(human_bytes(512 << 20), "512 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(100), "100 bytes");
    }

    #[test]
    fn cpu_forms() {
        assert_eq!(parse_milli("500m").unwrap(), 500);
        assert_eq!(parse_milli("1").unwrap(), 1000);
        assert_eq!(parse_milli("1.5").unwrap(), 1500);
        assert_eq!(parse_milli("0.0001").unwrap(), 1, "rounded up");
        assert_eq!(parse_milli("2e3").unwrap(), 2_000_000);
        assert_eq!(parse_milli("100u").unwrap(), 1);
    }

    #[test]
    fn memory_forms() {
        assert_eq!(parse_units("1Gi").unwrap(), 1 << 30);
        assert_eq!(parse_units("6903Mi").unwrap(), 6903 << 20);
        assert_eq!(parse_units("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_units("1.5Ki").unwrap(), 1536);
        assert_eq!(parse_units("128974848").unwrap(), 128974848);
        assert_eq!(parse_units("1E").unwrap(), 1_000_000_000_000_000_000);
    }

    #[test]
    fn bad_forms_are_errors() {
        for bad in ["", "abc", "1.2.3", "12Q", "-1", "1e", "Mi", "1 Gi x"] {
            assert!(parse_milli(bad).is_err(), "{bad} should fail");
        }
        assert!(matches!(
            parse_milli("99999999999999999999Ei"),
            Err(QuantityError::Overflow(_))
        ));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_cpu(1500), "1500m");
        assert_eq!(format_cpu(2000), "2");
        assert_eq!(format_bytes(6903 << 20), "6903Mi");
        assert_eq!(format_bytes(17 << 30), "17Gi");
        assert_eq!(format_bytes(1000), "1000");
    }
}
