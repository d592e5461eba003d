"""The turn engine (AgentLoop: model -> tools -> model; Agent: one turn of a conversation; llm/,
tools/, hooks) and, in runtime/, the task runtime that runs its turns as tasks."""
