//! `ipc-frames` vectors, run through `hanzo_ipc::frame` (the decoder the transport uses).

use super::{field, hex_decode, hex_encode, str_field};
use hanzo_ipc::frame::{decode_all, encode_frame, DEFAULT_MAX_FRAME};
use serde_json::Value;

pub fn run(case: &Value) -> Result<(), String> {
    if let Some(enc) = case.get("encode") {
        let ty = u8::try_from(super::u64_field(enc, "type")?)
            .map_err(|_| "malformed case: type must fit in a byte".to_string())?;
        let payload = hex_decode(str_field(enc, "payload_hex")?)?;
        let mut out = Vec::new();
        encode_frame(ty, &payload, u32::MAX, &mut out)
            .map_err(|e| format!("encode failed: {e}"))?;
        let want = str_field(case, "bytes_hex")?;
        let got = hex_encode(&out);
        return if got == want {
            Ok(())
        } else {
            Err(format!("encoded {got}, expected {want}"))
        };
    }
    let bytes = hex_decode(str_field(case, "bytes_hex")?)?;
    let max = match case.get("max_frame") {
        Some(v) => u32::try_from(
            v.as_u64()
                .ok_or("malformed case: max_frame must be an integer")?,
        )
        .map_err(|_| "malformed case: max_frame must fit in u32".to_string())?,
        None => DEFAULT_MAX_FRAME,
    };
    let want_frames: Vec<(u64, String)> = field(case, "frames")?
        .as_array()
        .ok_or("malformed case: frames must be an array")?
        .iter()
        .map(|f| {
            Ok((
                super::u64_field(f, "type")?,
                str_field(f, "payload_hex")?.to_string(),
            ))
        })
        .collect::<Result<_, String>>()?;
    let want_error = match field(case, "error")? {
        Value::Null => None,
        Value::String(s) => Some(s.as_str()),
        _ => return Err("malformed case: error must be null or a string".into()),
    };
    let (frames, error) = decode_all(&bytes, max);
    let got_frames: Vec<(u64, String)> = frames
        .iter()
        .map(|f| (u64::from(f.frame_type), hex_encode(&f.payload)))
        .collect();
    let got_error = error.as_ref().map(|e| e.vector_name());
    if got_frames != want_frames {
        return Err(format!("frames {got_frames:?}, expected {want_frames:?}"));
    }
    if got_error != want_error {
        return Err(format!("error {got_error:?}, expected {want_error:?}"));
    }
    Ok(())
}
