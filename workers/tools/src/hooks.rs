//! Hook execution (being written).
