"""Mnemosyne where agent frameworks look for memory (docs/integrations.md), each an optional extra:
``mnemosyne.integrations.langgraph`` (extra ``langgraph``: a LangGraph ``BaseStore``) and
``mnemosyne.integrations.agents`` (extra ``agents``: an OpenAI Agents SDK ``Session`` and memory
tools). They talk to a server through the client (``mnemosyne.client``), as any application does."""
