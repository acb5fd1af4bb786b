//! `settings.schema.json` is generated from the settings types and committed for editors; this
//! test fails when the two drift. Regenerate with `UPDATE_SCHEMA=1 cargo test -p hanzo-policy --test schema`.

use std::path::Path;

#[test]
fn committed_schema_matches_the_types() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("settings.schema.json");
    let mut generated =
        serde_json::to_string_pretty(&hanzo_policy::settings::json_schema()).expect("serializes");
    generated.push('\n');
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).expect("write schema");
    }
    let committed = std::fs::read_to_string(&path).expect("policy/settings.schema.json exists");
    assert!(
        committed == generated,
        "policy/settings.schema.json is stale; regenerate with UPDATE_SCHEMA=1 cargo test -p hanzo-policy --test schema"
    );
}

#[test]
fn schema_knows_every_top_level_key() {
    let schema = hanzo_policy::settings::json_schema();
    let props = schema["properties"].as_object().expect("properties");
    for key in [
        "$schema",
        "model",
        "api_key",
        "oauth_credentials",
        "mcp_servers",
        "permissions",
        "hooks",
        "custom_instructions",
        "input_mode",
        "sandbox",
        "oauth_providers",
        "lsp_servers",
    ] {
        assert!(props.contains_key(key), "schema lacks {key}");
    }
    assert_eq!(
        props.len(),
        12,
        "a key was added: update the unknown-key lists too"
    );
}
