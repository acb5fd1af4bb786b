//! The tools channel (supervisor ↔ tools worker). It has no request that could carry a credential.

use super::{impl_protocol, CommonEvent, CommonItem, CommonRequest, CommonResponse};
use crate::Role;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Common(CommonRequest),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Common(CommonResponse),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    Common(CommonItem),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Common(CommonEvent),
}

impl_protocol!(ToolsProtocol, Role::Tools);
