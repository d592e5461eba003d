// A2A extensions in the console. The ones the agent's card marks `required` are always on (the
// agent refuses a request without them: it would lock the console out); the others are
// checkboxes a person toggles. What is on goes in every request's `A2A-Extensions` header. The
// optional ones turned on are remembered per agent (localStorage), as the agent pick is kept in
// the page's address: a reload, or the agent picked back, finds them as they were left.

const KEY = "a2a-console-extensions";

export class ExtensionToggles {
  constructor(container, { storage = localStorage } = {}) {
    this.container = container;
    this.storage = storage;
    this.required = [];
    this.chosen = new Set();
    this.agentName = null;
  }

  get storageKey() {
    return this.agentName ? `${KEY}:${this.agentName}` : KEY;
  }

  // Show the extensions `card` declares, for the agent `agentName` (null: the server's one).
  show(card, agentName) {
    this.agentName = agentName;
    const declared = (card?.capabilities?.extensions || []).filter((entry) => typeof entry?.uri === "string");
    this.required = declared.filter((entry) => entry.required).map((entry) => entry.uri);
    const remembered = JSON.parse(this.storage.getItem(this.storageKey) || "[]");
    const optional = declared.filter((entry) => !entry.required);
    this.chosen = new Set(remembered.filter((uri) => optional.some((entry) => entry.uri === uri)));
    this.container.replaceChildren();
    for (const entry of declared) {
      const label = document.createElement("label");
      label.title = [entry.uri, entry.description, entry.required ? "(required by the agent)" : ""]
        .filter(Boolean).join("\n");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.dataset.uri = entry.uri;
      box.checked = entry.required || this.chosen.has(entry.uri);
      box.disabled = Boolean(entry.required);
      box.addEventListener("change", () => this.toggle(entry.uri, box.checked));
      label.append(box, " ", shortName(entry.uri));
      this.container.append(label);
    }
    this.container.hidden = declared.length === 0;
  }

  toggle(uri, on) {
    if (on) this.chosen.add(uri);
    else this.chosen.delete(uri);
    this.storage.setItem(this.storageKey, JSON.stringify([...this.chosen].sort()));
  }

  // The `A2A-Extensions` value of the next request: the required ones and those turned on.
  header() {
    const on = [...new Set([...this.required, ...this.chosen])].sort();
    return on.length ? on.join(", ") : null;
  }
}

// What a checkbox is labelled: the URI's last meaningful path segments ("timestamp/v1").
function shortName(uri) {
  const path = uri.replace(/^[a-z]+:\/\/[^/]+/i, "").split(/[/:]/).filter(Boolean);
  return path.slice(-2).join("/") || uri;
}
