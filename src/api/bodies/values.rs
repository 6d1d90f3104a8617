//! What a body's values may look like beyond their JSON types: the uuid forms every input takes,
//! and integers written with a zero fraction.

use serde_json::Value;

/// The uuids every input takes (`uuid::Uuid::parse_str`, which all of them use), as a pattern:
/// hyphenated, simple (32 digits), braced `{hyphenated}` or `urn:uuid:hyphenated`, digits and
/// the `urn:uuid:` prefix in either case. OpenAPI 3.1's `format` is an annotation, so the
/// document states this with it.
pub fn uuid_pattern() -> String {
    let h = "[0-9a-fA-F]";
    let hyphenated = format!("{h}{{8}}-{h}{{4}}-{h}{{4}}-{h}{{4}}-{h}{{12}}");
    let urn = "[uU][rR][nN]:[uU][uU][iI][dD]:";
    format!("^(?:{h}{{32}}|{hyphenated}|\\{{{hyphenated}\\}}|{urn}{hyphenated})$")
}

/// Writes every number of `value` with a zero fractional part as an integer (`484.0` as
/// `484`). JSON does not tell 484 from 484.0, nor does the document's JSON Schema (2020-12: a
/// number with a zero fractional part is an integer), nor Nova (an IntegerField takes
/// `int(484.0)`); serde's integer types and the objects' IntegerField would refuse the second
/// spelling. Only numbers below 2^53 in size are rewritten: a float holds every integer up to
/// there exactly, and beyond it a number may be one rounded (an integer past i64's range, which
/// is parsed as a float, stays one and is refused where an integer is expected). Other numbers
/// are left as they are (`484.5` is still refused where an integer is expected).
pub(super) fn integral_numbers(value: &mut Value) {
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < EXACT) {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_numbers),
        Value::Object(fields) => fields.values_mut().for_each(integral_numbers),
        _ => {}
    }
}
