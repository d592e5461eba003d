// One agent turn on the page: the answer (sanitized Markdown, streamed by artifact), the tool
// calls as rows (from `metadata.toolCall` of working status updates), the model's reasoning
// folded (text parts of working updates marked `metadata.thought`), usage, and the end state;
// a question (input required) is handed to `TurnView.onQuestion`, which the page sets.

import { renderMarkdown } from "./markdown.js";

export const TERMINAL = ["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"];
const messages = () => document.getElementById("messages");

export function bubble(kind, content) {
  const node = document.createElement("div");
  node.className = `message ${kind}`;
  if (content !== undefined) node.append(content);
  messages().append(node);
  node.scrollIntoView({ block: "end" });
  return node;
}

export function userBubble(text) {
  bubble("user", document.createTextNode(text));
}

export class TurnView {
  static onQuestion = () => {}; // (view, status message): the page shows the question

  constructor() {
    this.node = bubble("agent");
    this.tools = document.createElement("div");
    this.answer = document.createElement("div");
    this.answer.className = "answer";
    this.footer = document.createElement("div");
    this.node.append(this.tools, this.answer, this.footer);
    this.texts = new Map(); // artifact id -> text
    this.rows = new Map(); // tool call id -> row
    this.taskId = null;
    this.contextId = null;
    this.state = null;
  }

  get text() {
    return [...this.texts.values()].join("\n\n");
  }

  restore(texts) {
    this.texts = new Map(texts); // [artifact id, text so far]: later chunks append to their own
    this.render();
  }

  render() {
    this.answer.replaceChildren(renderMarkdown(this.text));
    this.node.scrollIntoView({ block: "end" });
  }

  handle(result) {
    if (result.task) return this.onTask(result.task);
    if (result.message) {
      this.texts.set("reply", textOf(result.message.parts));
      this.state = "message";
      return this.render();
    }
    if (result.artifactUpdate) return this.onArtifact(result.artifactUpdate);
    if (result.statusUpdate) return this.onStatus(result.statusUpdate);
  }

  onTask(task) {
    this.taskId = task.id;
    this.contextId = task.contextId;
    for (const artifact of task.artifacts || []) this.addArtifact(artifact, false);
    if (task.artifacts?.length) this.render();
    this.onState(task.status);
  }

  onArtifact(update) {
    this.addArtifact(update.artifact, update.append);
    this.render();
  }

  addArtifact(artifact, append) {
    const id = artifact.artifactId || "answer";
    const text = textOf(artifact.parts);
    this.texts.set(id, append ? (this.texts.get(id) || "") + text : text);
    for (const part of artifact.parts || []) {
      if (part.data !== undefined) this.tools.append(block("data", JSON.stringify(part.data, null, 2)));
      if (part.raw || part.url) this.tools.append(fileLink(part));
    }
  }

  onStatus(update) {
    const thought = (update.status?.message?.parts || []).filter((part) => part.metadata?.thought === true);
    if (thought.length) this.onThought(textOf(thought));
    const call = update.metadata?.toolCall;
    if (call) this.onToolCall(call);
    if (update.metadata?.usage) this.onUsage(update.metadata.usage);
    this.onState(update.status);
  }

  onThought(text) {
    // Folded, in the order it came among the tool calls: the latest run of thoughts grows.
    let folded = this.tools.lastElementChild;
    if (!folded?.classList.contains("thinking")) {
      folded = document.createElement("details");
      folded.className = "thinking";
      const summary = document.createElement("summary");
      summary.textContent = "Thinking";
      const body = document.createElement("div");
      body.className = "thought";
      folded.append(summary, body);
      this.tools.append(folded);
    }
    folded.querySelector(".thought").append(document.createTextNode(text));
  }

  onToolCall(call) {
    let row = this.rows.get(call.id);
    if (!row) {
      row = document.createElement("div");
      row.className = "tool";
      row.dataset.tool = call.name;
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = call.name;
      const outcome = document.createElement("span");
      outcome.className = "outcome";
      outcome.textContent = " running…";
      row.append(name, outcome, block("arguments", JSON.stringify(call.arguments ?? {}, null, 0)));
      this.rows.set(call.id, row);
      this.tools.append(row);
    }
    if (call.state === "finished") {
      row.querySelector(".outcome").textContent = call.ok ? ` done in ${call.durationMs} ms` : ` failed after ${call.durationMs} ms`;
      row.classList.toggle("failed", !call.ok);
      row.append(block(call.ok ? "result" : "error", call.result || ""));
    }
  }

  onUsage(usage) {
    const line = document.createElement("div");
    line.className = "usage";
    line.textContent =
      `tokens: ${usage.promptTokens ?? 0} in, ${usage.completionTokens ?? 0} out · ` +
      `model calls: ${usage.llmCalls ?? "?"} · tool calls: ${usage.toolCalls ?? 0}` +
      (usage.reasoningTokens ? ` · reasoning: ${usage.reasoningTokens}` : "") +
      (usage.cacheReadTokens || usage.cacheWriteTokens
        ? ` · cache: ${usage.cacheReadTokens ?? 0} read, ${usage.cacheWriteTokens ?? 0} written`
        : "");
    this.footer.append(line);
  }

  onState(status) {
    if (!status) return;
    this.state = status.state;
    if (status.state === "TASK_STATE_INPUT_REQUIRED" || status.state === "TASK_STATE_AUTH_REQUIRED") {
      TurnView.onQuestion(this, status.message);
    } else if (TERMINAL.includes(status.state) && status.state !== "TASK_STATE_COMPLETED") {
      const line = document.createElement("div");
      line.className = "state";
      line.textContent = `${status.state.replace("TASK_STATE_", "").toLowerCase()}: ${textOf(status.message?.parts) || ""}`;
      this.footer.append(line);
    }
  }
}

export function block(kind, text) {
  const pre = document.createElement("pre");
  pre.className = kind;
  pre.textContent = text;
  return pre;
}

function fileLink(part) {
  const link = document.createElement("a");
  link.textContent = `file: ${part.filename || "download"} (${part.mediaType || "?"})`;
  if (part.url && /^https?:/i.test(part.url)) link.href = part.url;
  else if (part.raw) {
    const bytes = Uint8Array.from(atob(part.raw), (c) => c.charCodeAt(0));
    link.href = URL.createObjectURL(new Blob([bytes], { type: part.mediaType || "application/octet-stream" }));
    link.download = part.filename || "file";
  }
  link.rel = "noopener noreferrer";
  const div = document.createElement("div");
  div.append(link);
  return div;
}

export function textOf(parts) {
  return (parts || []).filter((part) => typeof part.text === "string").map((part) => part.text).join("");
}
