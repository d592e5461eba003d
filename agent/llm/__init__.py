"""Model clients behind one interface (LLMClient): LiteLLM, the offline demo, the scripted one."""
