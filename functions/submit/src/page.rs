//! Page tokens: an opaque, URL-safe encoding of a store cursor.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mapi_problem::ApiError;
use mapi_store::Cursor;

/// Page sizes: default and largest.
pub const DEFAULT_PAGE: u32 = 50;
pub const MAX_PAGE: u32 = 200;

pub fn encode(cursor: &Cursor) -> String {
    let v = serde_json::json!({ "v": cursor.values, "id": cursor.id });
    URL_SAFE_NO_PAD.encode(v.to_string())
}

pub fn decode(token: &str) -> Result<Cursor, ApiError> {
    let bad =
        || ApiError::invalid("invalid page_token: pass the next_page_token of the previous page unchanged");
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let values = v.get("v").and_then(|x| x.as_array()).cloned().ok_or_else(bad)?;
    let id = v.get("id").and_then(|x| x.as_str()).ok_or_else(bad)?.to_owned();
    Ok(Cursor { values, id })
}

pub fn size(requested: Option<u32>) -> Result<u32, ApiError> {
    match requested {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::invalid(format!("page_size {n} is out of range: use 1 to {MAX_PAGE}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_garbage_is_refused() {
        let c = Cursor { values: vec![serde_json::json!("2026-11-30T00:00:00Z")], id: "run_x".into() };
        assert_eq!(decode(&encode(&c)).ok(), Some(c));
        assert!(decode("%%%").is_err());
        assert!(decode(&URL_SAFE_NO_PAD.encode("{}")).is_err());
        assert!(size(Some(0)).is_err() && size(Some(201)).is_err());
        assert_eq!(size(None).ok(), Some(DEFAULT_PAGE));
    }
}
