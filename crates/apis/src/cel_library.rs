//! The functions of the Kubernetes CEL libraries the CRDs' rules use (`find`, `lowerAscii`,
//! `matches`, `join`), for the tests that run the generated rules through the `cel`
//! interpreter, which lacks them: one stand-in for every rule test.

use std::sync::Arc;

use cel::extractors::This;

/// The Kubernetes regex library's `string.find(regex)`: the first match, or "".
fn find(This(s): This<Arc<String>>, re: Arc<String>) -> String {
    regex::Regex::new(&re)
        .ok()
        .and_then(|r| r.find(&s).map(|m| m.as_str().to_string()))
        .unwrap_or_default()
}

/// The Kubernetes strings library's `string.lowerAscii()`.
fn lower_ascii(This(s): This<Arc<String>>) -> String {
    s.to_ascii_lowercase()
}

/// CEL's `string.matches(regex)` (RE2, unanchored: the patterns anchor themselves).
fn matches(This(s): This<Arc<String>>, re: Arc<String>) -> bool {
    regex::Regex::new(&re).is_ok_and(|r| r.is_match(&s))
}

/// The Kubernetes strings library's `list.join(separator)`.
fn join(This(list): This<Arc<Vec<cel::Value>>>, separator: Arc<String>) -> String {
    list.iter()
        .map(|v| match v {
            cel::Value::String(s) => s.to_string(),
            other => format!("{other:?}"),
        })
        .collect::<Vec<_>>()
        .join(&separator)
}

/// A context with the library functions and `self` bound to `value`, as the API server
/// evaluates a rule.
pub(crate) fn context(value: cel::Value) -> cel::Context<'static, 'static> {
    let mut ctx = cel::Context::default();
    ctx.add_function("find", find).expect("find registers");
    ctx.add_function("lowerAscii", lower_ascii)
        .expect("lowerAscii registers");
    ctx.add_function("matches", matches)
        .expect("matches registers");
    ctx.add_function("join", join).expect("join registers");
    ctx.add_variable_from_value("self", value);
    ctx
}
