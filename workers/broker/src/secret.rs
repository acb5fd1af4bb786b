//! The broker's secrets are [`hanzo_policy::secret::Secret`], the one secret type of the project
//! (zeroized when dropped, `[redacted]` in `Debug` and `Display`).

pub use hanzo_policy::secret::Secret;
