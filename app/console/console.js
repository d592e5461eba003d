// The console: conversations, streamed answers (sanitized Markdown), tool calls as they run,
// questions and approvals inline, cancel, resume after a reload, raw events, export, credentials.
// It is an A2A client like any other: what it shows comes from the task's events (the tool
// rows from `metadata.toolCall` of working status updates, usage from the final one's
// `metadata.usage`; docs/console.md). On a server that hosts several agents (`GET /agents`), a
// picker chooses one: every request goes to `/{name}/`, so the sidebar (ListTasks) is that
// agent's, and a turn left streaming is followed again when its agent is picked back.

import { A2AError, Agent, AuthRequired, listAgents } from "./a2a.js";
import { ExtensionToggles } from "./extensions.js";
import { TERMINAL, TurnView, block, textOf, userBubble } from "./turn_view.js";

const $ = (id) => document.getElementById(id);
const AUTH_KEY = "a2a-console-credentials";
const RUNNING_KEY = "a2a-console-running";
const TEXT_MODES = ["text/plain", "application/json"];
// Where a stream ends on its own; anything else means it was cut (a dropped connection, a server
// that drained): the console follows the task again from the last event it saw.
const STREAM_ENDS = [...TERMINAL, "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED", "message"];
const FOLLOW_AGAIN = 5; // attempts, 0.5 s apart and more
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const state = {
  contextId: null, taskId: null, waiting: null, running: null, card: null, agentName: null, resumed: false,
};

const extensions = new ExtensionToggles($("extensions"));
const agent = new Agent({ credentials: credentialHeaders, extensions: () => extensions.header(), log: logRaw });

function credentialHeaders() {
  const saved = JSON.parse(sessionStorage.getItem(AUTH_KEY) || "null");
  if (!saved?.secret) return {};
  return saved.kind === "bearer" ? { Authorization: `Bearer ${saved.secret}` } : { "X-API-Key": saved.secret };
}

// The turn to follow again after a reload, kept per agent (a task is found only at its agent's path).
function runningKey() {
  return state.agentName ? `${RUNNING_KEY}:${state.agentName}` : RUNNING_KEY;
}

// --- raw mode --------------------------------------------------------------------------------

function logRaw(kind, document, id) {
  const arrow = kind === "request" ? "→" : "←";
  const label = id ? `${arrow} [${id}] ` : `${arrow} `;
  $("raw-log").append(document ? label + JSON.stringify(document) + "\n" : "");
}

// --- notices and credentials -----------------------------------------------------------------

function notice(message) {
  $("notice").textContent = message;
  $("notice").hidden = !message;
}

function askCredentials(message) {
  notice(message || "This agent wants credentials (HTTP 401): give an API key or a bearer token.");
  $("auth-message").textContent = message || "This agent wants credentials (HTTP 401). They are kept for this tab only.";
  if (!$("auth-dialog").open) $("auth-dialog").showModal();
}

async function guarded(work) {
  try {
    return await work();
  } catch (error) {
    report(error);
    return undefined;
  }
}

function report(error) {
  if (error instanceof AuthRequired) askCredentials();
  else if (error instanceof A2AError) notice(`The agent refused: ${error.message}`);
  else if (error?.name !== "AbortError") notice(`Something went wrong: ${error?.message || error}`);
}

// --- questions, approvals, client tools ------------------------------------------------------

function showQuestion(view, message) {
  const box = document.createElement("div");
  box.className = "question";
  const parts = message?.parts || [];
  const approval = parts.find((part) => part.data?.approval)?.data.approval;
  const toolCalls = parts.find((part) => part.data?.toolCalls)?.data.toolCalls;
  const question = textOf(parts);
  state.waiting = { taskId: view.taskId, contextId: view.contextId, box };
  state.taskId = view.taskId;
  if (approval) {
    box.append(block("pending", `${approval.name}(${JSON.stringify(approval.arguments)})`));
    for (const [label, approved] of [["Approve", true], ["Deny", false]]) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = label;
      button.addEventListener("click", () => answer({ data: { approved } }, label.toLowerCase()));
      box.append(button);
    }
  } else if (toolCalls) {
    box.append(block("pending", JSON.stringify(toolCalls, null, 2)));
    const results = document.createElement("textarea");
    results.value = JSON.stringify({ toolResults: toolCalls.map((call) => ({ id: call.id, result: "" })) }, null, 2);
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = "send results";
    button.addEventListener("click", () => answer({ data: JSON.parse(results.value) }, "tool results"));
    box.append(results, button);
  } else {
    const text = document.createElement("div");
    text.textContent = question || "The agent needs more input.";
    box.append(text);
    $("input").placeholder = "Answer the question…";
  }
  view.footer.append(box);
  $("input").focus();
}

// An answered question keeps its place in the conversation, but it cannot be answered twice.
function settle(box) {
  if (!box) return;
  box.classList.add("answered");
  for (const control of box.querySelectorAll("button, textarea")) control.disabled = true;
}

async function answer(part, shown) {
  if (!state.waiting) return;
  await send(shown, { taskId: state.waiting.taskId, parts: [part] });
}

TurnView.onQuestion = showQuestion;

// --- sending, streaming, resuming ------------------------------------------------------------

function newMessage(text, parts, taskId) {
  const message = { messageId: crypto.randomUUID(), role: "ROLE_USER", parts: parts || [{ text }] };
  if (state.contextId) message.contextId = state.contextId;
  if (taskId) message.taskId = taskId;
  return message;
}

async function send(text, { taskId = null, parts = null } = {}) {
  notice("");
  const file = $("file").files?.[0];
  if (!parts && file) parts = [{ text }, await filePart(file)];
  userBubble(text);
  settle(state.waiting?.box);
  state.waiting = null;
  $("input").placeholder = "Message the agent (Enter sends, Shift+Enter is a new line)";
  const view = new TurnView();
  await runStream(view, "SendStreamingMessage", { message: newMessage(text, parts, taskId) });
  $("file").value = "";
}

async function runStream(view, method, params, lastEventId) {
  const controller = new AbortController();
  const savedAs = runningKey(); // the agent picked when the turn started, even if another is now
  state.running = { view, controller };
  $("cancel").hidden = false;
  let last = lastEventId;
  let completed = false;
  for (let attempt = 0; ; attempt += 1) {
    let cut = null;
    try {
      await agent.stream(method, params, {
        lastEventId: last,
        signal: controller.signal,
        onEvent: (result, id) => {
          view.handle(result);
          if (view.contextId) state.contextId = view.contextId;
          if (view.taskId) state.taskId = view.taskId;
          if (id) last = id;
          sessionStorage.setItem(savedAs, JSON.stringify({
            taskId: view.taskId, contextId: view.contextId, lastEventId: last, texts: [...view.texts],
          }));
        },
      });
    } catch (error) {
      if (error instanceof AuthRequired || error instanceof A2AError || error?.name === "AbortError") {
        report(error);
        break;
      }
      cut = error; // the connection dropped mid-stream
    }
    if (STREAM_ENDS.includes(view.state) || (!cut && !view.taskId)) {
      completed = true;
      if (attempt) notice("");
      break;
    }
    if (!view.taskId || attempt >= FOLLOW_AGAIN || controller.signal.aborted) {
      notice(`The stream was cut (${cut?.message || "it ended before the task did"}); ` +
        "the conversation is kept: reload the page to follow the task again.");
      break;
    }
    notice("The stream was cut; following the task again…");
    await pause(500 * (attempt + 1));
    [method, params] = ["SubscribeToTask", { id: view.taskId }];
  }
  if (state.running?.view !== view) return; // an answer already started the next stream
  state.running = null;
  $("cancel").hidden = true;
  $("export").hidden = !state.taskId;
  if (completed) sessionStorage.removeItem(savedAs);
  await guarded(refreshConversations);
}

async function resumeAfterReload() {
  const saved = JSON.parse(sessionStorage.getItem(runningKey()) || "null");
  if (!saved?.taskId) return false;
  state.contextId = saved.contextId;
  await openConversation(saved.contextId, { skipTask: saved.taskId });
  const view = new TurnView();
  view.taskId = saved.taskId;
  view.contextId = saved.contextId;
  view.restore(saved.texts || []);
  await runStream(view, "SubscribeToTask", { id: saved.taskId }, saved.lastEventId);
  return true;
}

async function filePart(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return { raw: btoa(binary), mediaType: file.type || "application/octet-stream", filename: file.name };
}

// --- conversations ---------------------------------------------------------------------------

async function refreshConversations() {
  const base = agent.base;
  const result = await agent.call("ListTasks", { pageSize: 100, historyLength: 10 });
  if (agent.base !== base) return; // another agent was picked meanwhile: its list is shown
  const seen = new Map();
  for (const task of result.tasks || []) {
    const first = (task.history || []).find((message) => message.role === "ROLE_USER");
    seen.set(task.contextId, textOf(first?.parts) || task.id); // newest first: the oldest wins
  }
  const list = $("conversations");
  list.replaceChildren();
  list.dataset.agent = state.agentName || ""; // whose conversations these are
  for (const [contextId, label] of seen) {
    const item = document.createElement("li");
    item.textContent = label;
    item.title = contextId;
    item.dataset.context = contextId;
    item.classList.toggle("current", contextId === state.contextId);
    item.addEventListener("click", () => guarded(() => openConversation(contextId)));
    list.append(item);
  }
}

async function openConversation(contextId, { skipTask = null } = {}) {
  state.contextId = contextId;
  state.waiting = null;
  $("messages").replaceChildren();
  const base = agent.base;
  const result = await agent.call("ListTasks", {
    contextId, pageSize: 100, historyLength: 100, includeArtifacts: true,
  });
  if (agent.base !== base) return;
  const tasks = (result.tasks || []).slice().reverse();
  for (const task of tasks) {
    for (const message of task.history || []) {
      if (message.role === "ROLE_USER") userBubble(textOf(message.parts));
    }
    if (task.id === skipTask) continue; // its answer is resumed by the caller
    const view = new TurnView();
    view.onTask(task);
  }
  state.taskId = tasks.at(-1)?.id || null;
  $("export").hidden = !state.taskId;
  for (const item of $("conversations").children) item.classList.toggle("current", item.dataset.context === contextId);
}

async function exportTask() {
  const task = await agent.call("GetTask", { id: state.taskId, historyLength: 100 });
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([JSON.stringify(task, null, 2)], { type: "application/json" }));
  link.download = `task-${state.taskId}.json`;
  link.click();
}

// --- wiring ----------------------------------------------------------------------------------

async function start() {
  const agents = await listAgents({ credentials: credentialHeaders, log: logRaw });
  const picker = $("agent-picker");
  picker.replaceChildren();
  for (const { name, description } of agents || []) {
    const option = document.createElement("option");
    option.value = name;
    option.textContent = name;
    option.title = description || "";
    picker.append(option);
  }
  // One agent (a server without an agents file lists its one, by its card's name; another server
  // has no list): nothing to pick, and it is at the root.
  const several = agents?.length > 1;
  picker.hidden = !several;
  const wanted = new URLSearchParams(location.search).get("agent");
  const named = several ? agents.find((entry) => entry.name === wanted) : null;
  await openAgent(several ? (named || agents[0]).name : null);
  if (wanted && several && !named) notice(`This server has no agent named "${wanted}".`);
}

// Show one agent: its card, its conversations, its turn left running. null: the server's one agent.
// The same agent again (start() after credentials were given) keeps what the page shows.
async function openAgent(name) {
  if (name !== state.agentName || !state.card) {
    if (state.running) { // the turn goes on at the agent; picking it back follows it again
      state.running.controller.abort();
      state.running = null;
      $("cancel").hidden = true;
    }
    Object.assign(state, { agentName: name, contextId: null, taskId: null, waiting: null, card: null, resumed: false });
    agent.base = name ? `/${encodeURIComponent(name)}/` : "/";
    $("messages").replaceChildren();
    $("conversations").replaceChildren();
    delete $("conversations").dataset.agent;
    $("export").hidden = true;
    $("input").placeholder = "Message the agent (Enter sends, Shift+Enter is a new line)";
  }
  if (name) {
    $("agent-picker").value = name;
    if (!$("agent-picker").hidden) history.replaceState(null, "", `?agent=${encodeURIComponent(name)}`);
  }
  const card = await agent.card();
  if (state.agentName !== name) return; // another agent was picked while its card came
  state.card = card;
  extensions.show(card, name); // before the conversations: a required one is in every request
  $("agent-name").textContent = card.name;
  $("agent-description").textContent = card.description || "";
  document.title = `${card.name} · A2A console`;
  const modes = card.defaultInputModes || [];
  $("file").hidden = !modes.some((mode) => !TEXT_MODES.includes(mode));
  notice("");
  await refreshConversations();
  if (state.resumed || state.agentName !== name) return;
  state.resumed = true;
  await resumeAfterReload();
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("input").value.trim();
  if (!text) return;
  if (state.running) { // the text stays in the composer, to send once the answer has ended
    notice("An answer is still streaming: send when it ends, or cancel it.");
    return;
  }
  $("input").value = "";
  const taskId = state.waiting?.taskId || null;
  guarded(() => send(text, { taskId }));
});
$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("cancel").addEventListener("click", () =>
  guarded(async () => {
    const taskId = state.running?.view.taskId || state.taskId;
    if (taskId) await agent.call("CancelTask", { id: taskId });
  }),
);
$("new-conversation").addEventListener("click", () => {
  state.contextId = null;
  state.taskId = null;
  state.waiting = null;
  $("messages").replaceChildren();
  $("export").hidden = true;
  for (const item of $("conversations").children) item.classList.remove("current");
});
$("export").addEventListener("click", () => guarded(exportTask));
$("agent-picker").addEventListener("change", (event) => guarded(() => openAgent(event.target.value)));
$("raw-toggle").addEventListener("change", (event) => {
  $("raw").hidden = !event.target.checked;
});
$("copy-raw").addEventListener("click", () => navigator.clipboard?.writeText($("raw-log").textContent));
$("sign-in").addEventListener("click", () => askCredentials("Credentials for this agent (kept for this tab only)."));
$("auth-form").addEventListener("submit", () => {
  sessionStorage.setItem(AUTH_KEY, JSON.stringify({ kind: $("auth-kind").value, secret: $("auth-secret").value }));
  $("auth-secret").value = "";
  guarded(start);
});

guarded(start);
