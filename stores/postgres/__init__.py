"""The PostgreSQL stores (DATABASE_URL=postgresql://...): imported only when that URL names them."""
