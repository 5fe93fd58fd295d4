//! Gateway API objects -> [`Snapshot`] + statuses. Pure and synchronous: no clock, no
//! environment, no network, no randomness; every output is sorted, so the same [`Resources`]
//! always give the same [`Translation`].

pub mod api;
pub mod manifest;
pub mod resources;

pub use resources::{ObjectKey, Resources};

use crate::model::{ObjectRef, Snapshot};

/// What translation needs besides the objects.
#[derive(Clone, Debug)]
pub struct Settings {
    /// GatewayClasses whose `spec.controllerName` equals this are pier's.
    pub controller_name: String,
    /// Serve only this Gateway (`--gateway NS/NAME`).
    pub gateway: Option<ObjectRef>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            controller_name: crate::DEFAULT_CONTROLLER_NAME.to_string(),
            gateway: None,
        }
    }
}

#[derive(Debug, Default)]
pub struct Translation {
    /// `generation` is 0: the publisher numbers snapshots.
    pub snapshot: Snapshot,
}

pub fn translate(_resources: &Resources, _settings: &Settings) -> Translation {
    Translation::default()
}
