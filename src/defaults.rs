//! Every option's default in one document, read from the types that own them, in the shape
//! Python shows as `vdifrec.defaults`: `recorder`, `sender`, `signal` (the synthetic signal's
//! settings, listed once though the sender and the generator both take them), `generate`,
//! `check`.

use crate::analysis::check::CheckOptions;
use crate::record::config::RecorderOptions;
use crate::sources::generate::{GenerateOptions, SignalSpec};
use crate::sources::sender::SendOptions;
use serde_json::{json, Value};

/// The defaults, by part.
pub fn defaults() -> Value {
    json!({
        "recorder": RecorderOptions::default(),
        "sender": without_signal(json!(SendOptions::default())),
        "signal": SignalSpec::default(),
        "generate": without_signal(json!(GenerateOptions::default())),
        "check": CheckOptions::default(),
    })
}

fn without_signal(mut options: Value) -> Value {
    if let Some(o) = options.as_object_mut() {
        o.remove("signal");
    }
    options
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_part_has_its_defaults() {
        let d = super::defaults();
        assert_eq!(d["recorder"]["ring"], 1u64 << 30);
        assert_eq!(d["signal"]["fps"], 125_000);
        assert!(d["sender"].get("signal").is_none() && d["sender"]["pool"] == 1024);
        assert_eq!(d["generate"]["seconds"], 1.0);
    }
}
