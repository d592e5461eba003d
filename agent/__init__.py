"""The agent engine: AgentLoop (one turn), Agent (many turns per context), TaskRunner (tasks)."""
