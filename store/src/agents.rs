//! Agent definitions: create, get, list, update, delete.

use crate::error::{Result, StoreError};
use crate::rows::{agent_from_row, now_ms, to_i64, AGENT_COLUMNS};
use crate::types::{Agent, AgentDef};
use crate::RunStore;
use rusqlite::{params, OptionalExtension};

fn validate_agent_name(name: &str) -> Result<()> {
    let bad = |why| {
        Err(StoreError::InvalidAgentName {
            name: name.to_string(),
            why,
        })
    };
    if name.trim().is_empty() {
        return bad("it is empty");
    }
    if name.chars().count() > 128 {
        return bad("it is longer than 128 characters");
    }
    if name.chars().any(char::is_control) {
        return bad("it contains a control character");
    }
    Ok(())
}

impl RunStore {
    /// Stores a new agent definition; its name must be valid and not taken, and no field may hold a known secret.
    pub fn create_agent(&mut self, def: &AgentDef) -> Result<Agent> {
        validate_agent_name(&def.name)?;
        let tools = serde_json::to_string(&def.tools).expect("a list of strings serializes");
        for (field, text) in [
            ("name", def.name.as_str()),
            ("model", def.model.as_str()),
            ("system_prompt", def.system_prompt.as_str()),
            ("tools", tools.as_str()),
        ] {
            self.guard("agents", field, text)?;
        }
        let created_ms = now_ms();
        let inserted = self.conn.execute(
            "INSERT INTO agents (name, model, system_prompt, tools, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(name) DO NOTHING",
            params![
                def.name,
                def.model,
                def.system_prompt,
                tools,
                to_i64(created_ms)
            ],
        )?;
        if inserted == 0 {
            return Err(StoreError::AgentExists(def.name.clone()));
        }
        Ok(Agent {
            def: def.clone(),
            created_ms,
        })
    }

    /// The stored agent named `name`, if there is one.
    pub fn get_agent(&self, name: &str) -> Result<Option<Agent>> {
        self.conn
            .query_row(
                &format!("SELECT {AGENT_COLUMNS} FROM agents WHERE name = ?1"),
                [name],
                agent_from_row,
            )
            .optional()?
            .transpose()
    }

    /// All agents, by name.
    pub fn list_agents(&self) -> Result<Vec<Agent>> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {AGENT_COLUMNS} FROM agents ORDER BY name"))?;
        let rows = stmt.query_map([], agent_from_row)?;
        rows.map(|r| r?).collect()
    }

    /// Replace the model, system prompt and tools of the agent `def.name` (the name is the key
    /// and does not change). Returns the stored agent, or `None` when there is no such agent.
    pub fn update_agent(&mut self, def: &AgentDef) -> Result<Option<Agent>> {
        let tools = serde_json::to_string(&def.tools).expect("a list of strings serializes");
        for (field, text) in [
            ("model", def.model.as_str()),
            ("system_prompt", def.system_prompt.as_str()),
            ("tools", tools.as_str()),
        ] {
            self.guard("agents", field, text)?;
        }
        let changed = self.conn.execute(
            "UPDATE agents SET model = ?2, system_prompt = ?3, tools = ?4 WHERE name = ?1",
            params![def.name, def.model, def.system_prompt, tools],
        )?;
        if changed == 0 {
            return Ok(None);
        }
        self.get_agent(&def.name)
    }

    /// Delete an agent definition; its past runs stay. Returns whether it existed.
    pub fn delete_agent(&mut self, name: &str) -> Result<bool> {
        Ok(self
            .conn
            .execute("DELETE FROM agents WHERE name = ?1", [name])?
            > 0)
    }
}
