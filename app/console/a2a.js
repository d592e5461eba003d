// A2A 1.0 over JSON-RPC from the browser: calls, and streams read from fetch (EventSource cannot
// POST). Every request and every event is handed to `log` (the console's raw mode), and a 401
// raises AuthRequired so the page can ask for credentials. An agent lives at a base path: "/" for
// a server's one agent, "/{name}/" for one of the agents it hosts (JSON-RPC and card under it).

export class AuthRequired extends Error {}

export class A2AError extends Error {
  constructor(error) {
    super(error?.message || "the agent answered with an error");
    this.error = error;
  }
}

// The agents the server hosts (`GET /agents`: [{name, description, url}]), or null when it serves
// one agent (404: a server without an agents file, or another A2A server).
export async function listAgents({ credentials = () => ({}), log = () => {} } = {}) {
  const response = await fetch("/agents", { headers: credentials() });
  if (response.status === 401) throw new AuthRequired();
  if (response.status === 404) return null;
  if (!response.ok) throw new Error(`GET /agents answered HTTP ${response.status}`);
  const document = await response.json();
  log("agents", document);
  return Array.isArray(document.agents) ? document.agents : [];
}

export class Agent {
  constructor({ base = "/", credentials = () => ({}), extensions = () => null, log = () => {} } = {}) {
    this.base = base;
    this.credentials = credentials; // () => headers (X-API-Key or Authorization)
    this.extensions = extensions; // () => the A2A-Extensions value, or null for none
    this.log = log;
    this.nextId = 1;
  }

  headers(extra = {}) {
    const extensions = this.extensions();
    return {
      "Content-Type": "application/json",
      "A2A-Version": "1.0",
      ...(extensions ? { "A2A-Extensions": extensions } : {}),
      ...this.credentials(),
      ...extra,
    };
  }

  get endpoint() {
    return this.base;
  }

  async card() {
    const response = await fetch(`${this.base}.well-known/agent-card.json`, { headers: this.credentials() });
    if (response.status === 401) throw new AuthRequired();
    const card = await response.json();
    this.log("card", card);
    return card;
  }

  async call(method, params) {
    const body = { jsonrpc: "2.0", id: this.nextId++, method, params };
    this.log("request", body);
    const response = await fetch(this.endpoint, {
      method: "POST",
      headers: this.headers(),
      body: JSON.stringify(body),
    });
    if (response.status === 401) throw new AuthRequired();
    const answer = await response.json();
    this.log("response", answer);
    if (answer.error) throw new A2AError(answer.error);
    return answer.result;
  }

  // Calls `onEvent(result, id)` for each event until the stream ends; returns the last id.
  async stream(method, params, { onEvent, lastEventId, signal } = {}) {
    const body = { jsonrpc: "2.0", id: this.nextId++, method, params };
    this.log("request", body);
    const extra = { Accept: "text/event-stream" };
    if (lastEventId) extra["Last-Event-ID"] = lastEventId;
    const response = await fetch(this.endpoint, {
      method: "POST",
      headers: this.headers(extra),
      body: JSON.stringify(body),
      signal,
    });
    if (response.status === 401) throw new AuthRequired();
    if (!(response.headers.get("content-type") || "").startsWith("text/event-stream")) {
      const answer = await response.json();
      this.log("response", answer);
      throw new A2AError(answer.error);
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let last = lastEventId;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer = (buffer + value).replace(/\r\n/g, "\n"); // SSE lines may end in CRLF
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let id = null;
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
          else if (line.startsWith("id:")) id = line.slice(3).trim();
        }
        if (!data.length) continue;
        const document = JSON.parse(data.join("\n"));
        this.log("event", document, id);
        if (document.error) throw new A2AError(document.error);
        if (id) last = id;
        onEvent(document.result, id);
      }
    }
    return last;
  }
}
