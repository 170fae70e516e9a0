//! A gate's keys on Redis, built once per `Gate` handle (`GateName` keeps
//! them), and the capacity up to which a gate keeps its holders inline.

use crate::name::Name;

/// keys.lua's INLINE: a gate of at most this capacity keeps its holders
/// inline in its meta hash, where pass_many.lua can make passes.
pub(super) const INLINE: u32 = 8;

/// A gate's key on Redis as the scripts take it (the meta hash m: they
/// derive the others from its name, see keys.lua, since each key argument
/// costs Redis time on every call), its pub/sub channel, and the base they
/// start with, for the key prefix `prefix`.
#[derive(Debug, Clone)]
pub(crate) struct GateKeys {
    pub(crate) prefix: String,
    pub(crate) base: String,
    pub(crate) keys: [String; 1],
    pub(crate) channel: String,
}

impl GateKeys {
    pub(crate) fn new(prefix: &str, gate: &Name) -> GateKeys {
        let base = format!("{prefix}:gate:{{{}}}", gate.as_str());
        let key = |suffix: &str| format!("{base}{suffix}");
        GateKeys {
            prefix: prefix.to_owned(),
            keys: [key(":m")],
            channel: key(":n"),
            base,
        }
    }
}
