"""Fakes of the model providers' own APIs, one per wire format (see `server.py`)."""
