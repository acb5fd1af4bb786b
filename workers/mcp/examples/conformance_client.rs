//! The MCP conformance suite's client, for now over the test HTTP/1.1 client (later the lead
//! wires the same `hanzo_mcp::conformance::run` behind `hanzo-dev mcp conformance-client URL`
//! on the real worker and broker path). The harness appends the server URL as the last argument
//! and names the scenario in `MCP_CONFORMANCE_SCENARIO`.

#[path = "../tests/support/http1.rs"]
mod http1;

use std::sync::Arc;

fn main() {
    let Some(url) = std::env::args()
        .next_back()
        .filter(|a| a.starts_with("http"))
    else {
        eprintln!("usage: conformance_client URL (scenario in MCP_CONFORMANCE_SCENARIO)");
        std::process::exit(2);
    };
    let Some(scenario) = hanzo_mcp::conformance::scenario_from_env() else {
        eprintln!("{} is not set", hanzo_mcp::conformance::SCENARIO_ENV);
        std::process::exit(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(hanzo_mcp::conformance::run(
        &scenario,
        &url,
        Arc::new(http1::Http1Client::default()),
    ));
    std::process::exit(code);
}
