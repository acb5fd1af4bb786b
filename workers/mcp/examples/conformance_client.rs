//! The MCP conformance suite's client logic (`hanzo_mcp::conformance::run`) over the test
//! HTTP/1.1 client, without the broker, worker or sandbox: the library's check. The product's
//! client is `hanzo-dev mcp conformance-client URL` (broker and mcp worker, OAuth included).
//! The harness appends the server URL as the last argument and names the scenario in
//! `MCP_CONFORMANCE_SCENARIO`.

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
