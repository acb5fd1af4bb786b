//! `mcp-normalization` vectors: `server` and `tool` go through the real
//! `hanzo_mcp::qualified_tool_name` (the function the mcp worker names tools with) and the result
//! is compared exactly.
use super::str_field;
use serde_json::Value;

pub fn run(case: &Value) -> Result<(), String> {
    let server = str_field(case, "server")?;
    let tool = str_field(case, "tool")?;
    let expect = str_field(case, "expect")?;
    let got = hanzo_mcp::qualified_tool_name(server, tool);
    if got == expect {
        Ok(())
    } else {
        Err(format!("expected {expect:?}, got {got:?}"))
    }
}
