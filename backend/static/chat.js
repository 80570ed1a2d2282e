// The conversation: the chat log, held calls (Approve / Deny), undo, turns and past sessions.
import { ApiError } from "./api.js";
import { openDocument } from "./documents.js";
import { $, clearError, dateTime, describe, el, notice, showError, showView, state, timezone } from "./page.js";
import { refreshTasks } from "./tasks.js";

// ---------------------------------------------------------------- chat log

/** Statuses of tool results that changed tasks (or saved a memory): the service can undo such a turn. */
const CHANGES = new Set(["created", "updated", "completed", "reopened", "deleted", "restored", "purged", "remembered"]);

const changedTasks = (results) => (results ?? []).some((r) => CHANGES.has(r.result?.status));

/** A call in a few words when nothing better is known: "delete_todo task 2". */
function callLabel(call) {
  const args = call.arguments ?? {};
  const what = args.todo_id ? ` task ${args.todo_id}` : args.title ? ` “${args.title}”` : "";
  return `${call.name}${what}`;
}

function activityText(call, result) {
  const r = result?.result ?? {};
  const todo = r.todo;
  const label = todo ? `task ${todo.number}: ${todo.title}` : "";
  if (r.list && r.status === "created") return `Made the list “${r.list.name}”`;
  switch (r.status) {
    case "created":
      return `Added ${label}`;
    case "updated":
      return `Updated ${label}`;
    case "completed":
      return `Completed ${label}`;
    case "reopened":
      return `Reopened ${label}`;
    case "deleted":
      return `Deleted task ${r.number ?? ""}: ${r.title ?? ""}`;
    case "restored":
      return `Restored ${label}`;
    case "purged":
      return r.count === undefined ? `Deleted task ${r.number}: ${r.title} for good` : `Emptied the trash (${r.count})`;
    case "undone":
      return r.summary;
    case "remembered":
      return `Remembered “${r.memory?.text ?? ""}”`;
    case "forgotten":
      return `Forgot “${r.memory?.text ?? ""}”`;
    case "denied":
      return `Not done (denied): ${call.summary ?? callLabel(call)}`;
    case "expired":
      return `Not done (not answered in time): ${call.summary ?? callLabel(call)}`;
    case "error":
      return `${call.name} failed: ${r.error}`;
  }
  if (Array.isArray(r.todos)) return `Listed ${r.todos.length} of ${r.total} tasks`;
  if (Array.isArray(r.lists)) return `Listed your ${r.lists.length} lists`;
  if (Array.isArray(r.passages)) return `Searched your documents (${r.passages.length} passages)`;
  if (call.name === "get_user_context" && result) return "Checked your task counts and local time";
  if (!result) return `${call.name}…`;
  return `Used ${call.name}`;
}

function clearLog() {
  $("#log").replaceChildren();
}

function addMessage(role, text = "") {
  $("#log").querySelector(".empty")?.remove();
  const body = el("div", { className: "text", text });
  const activity = el("ul", { className: "activity", attrs: { "aria-label": "Tool activity" } });
  const who = el("span", { className: "who-said", text: role === "user" ? "You" : "Agent" });
  const message = el("article", { className: `message ${role}` }, [who, activity, body]);
  $("#log").append(message);
  message.scrollIntoView({ block: "end" });
  return message;
}

function badge(message, kind, text, title) {
  const mark = el("span", { className: `badge ${kind}`, text, attrs: { title } });
  message.querySelector(".who-said").after(mark);
}

const markStub = (message) =>
  badge(message, "stub", "stub", "Answered by the rule-based stub responder, not a model");

function showActivity(message, call, result) {
  const list = message.querySelector(".activity");
  let item = list.querySelector(`[data-call="${CSS.escape(call.id)}"]`);
  if (!item) {
    item = el("li", { attrs: { "data-call": call.id } });
    list.append(item);
  }
  item.textContent = activityText(call, result);
  item.classList.toggle("failed", result?.result?.status === "error");
  showSources(message, result?.result?.passages);
}

/** "Lease › Pets": a passage named as answers name it. */
function citation(passage) {
  const { title, heading } = passage;
  if (!heading || heading === title) return title;
  return heading.startsWith(`${title} › `) ? heading : `${title} › ${heading}`;
}

/** Under an answer, a link to each document section its searches found, once each. */
function showSources(message, passages) {
  if (!Array.isArray(passages)) return;
  let list = message.querySelector(".sources");
  if (!list) {
    list = el("ul", { className: "sources", attrs: { "aria-label": "Sources" } });
    message.append(list);
  }
  for (const passage of passages) {
    const named = citation(passage);
    const key = `${passage.document_id} ${named}`;
    if ([...list.children].some((item) => item.dataset.source === key)) continue;
    const link = el("button", { className: "link", text: named, attrs: { type: "button", "data-document": passage.document_id } });
    link.addEventListener("click", () => openDocument(passage.document_id));
    list.append(el("li", { attrs: { "data-source": key } }, [link]));
  }
}

// ---------------------------------------------------------------- held calls: Approve / Deny

const cardOf = (approvalId) => $("#log").querySelector(`[data-approval="${CSS.escape(approvalId)}"]`);

/** The card of a call held for the person's yes ({id, summary}), at the end of `message`. */
function approvalCard(message, { id, summary }) {
  const existing = cardOf(id);
  if (existing) return existing;
  const card = el("div", { className: "approval", attrs: { role: "group", "aria-label": `Waiting for you: ${summary}`, "data-approval": id } });
  const reason = el("input", {
    attrs: { "aria-label": `Reason, if you deny: ${summary}`, placeholder: "Reason, if you deny (optional)", maxlength: "500" },
  });
  const approve = el("button", { className: "approve", text: "Approve", attrs: { type: "button", "aria-label": `Approve: ${summary}` } });
  const deny = el("button", { className: "danger", text: "Deny", attrs: { type: "button", "aria-label": `Deny: ${summary}` } });
  approve.addEventListener("click", () => answerApproval(card, { id, approved: true }));
  deny.addEventListener("click", () => answerApproval(card, { id, approved: false, reason: reason.value.trim() || undefined }));
  reason.addEventListener("keydown", (event) => event.key === "Enter" && deny.click()); // a reason is a no
  card.append(el("p", { className: "summary", text: `${summary}?` }), el("div", { className: "actions" }, [approve, deny, reason]));
  card.dataset.summary = summary;
  message.append(card);
  return card;
}

/** A card answered (here, by a typed yes or no, or in another tab): its outcome, no buttons. */
function settleCard(card, outcome, reason) {
  if (!card || card.dataset.state) return;
  card.dataset.state = outcome;
  card.querySelector(".summary").textContent = card.dataset.summary; // no longer a question
  const said = { approved: "Approved", denied: "Denied", expired: "Expired: not answered in time" }[outcome];
  card.querySelector(".actions").remove();
  card.append(el("p", { className: `outcome ${outcome}`, text: outcome === "denied" && reason ? `${said}: ${reason}` : said }));
}

/** What the stored or streamed result of an answered call says of the answer. */
function outcomeOf(result) {
  const status = result?.result?.status;
  if (status === "expired") return "expired";
  if (status === "denied" || result?.approval?.approved === false) return "denied";
  return "approved";
}

async function answerApproval(card, answer) {
  if (state.busy) return;
  const buttons = [...card.querySelectorAll("button")];
  buttons.forEach((button) => (button.disabled = true));
  const failed = await runTurn({ approvals: [answer] });
  if (!failed) {
    settleCard(card, answer.approved ? "approved" : "denied", answer.reason); // if the stream did not
  } else if (failed instanceof ApiError && failed.status === 409 && !failed.accepted) {
    await openSession(state.sessionId); // answered elsewhere, or expired: show it as it stands
    showError(new ApiError(409, "That question was answered elsewhere or has expired; here is the chat as it stands."));
  } else {
    buttons.forEach((button) => (button.disabled = false));
  }
}

// ---------------------------------------------------------------- undo

/** The Undo button sits on the latest turn that changed tasks and is not undone. */
function placeUndo() {
  $("#log").querySelector(".undo")?.remove();
  const turn = [...$("#log").querySelectorAll(".message[data-changed]:not([data-undone])")].at(-1);
  if (!turn) return;
  const button = el("button", {
    className: "undo",
    text: "↶ Undo",
    attrs: { type: "button", "aria-label": "Undo the changes of this turn", title: "Take back what this turn changed" },
  });
  button.addEventListener("click", () => undoTurn(button));
  turn.append(button);
}

/**
 * The service undoes a session's turns newest first: the turn it undid and every later
 * one that changed tasks are undone now. (A turn that answered a held call shows its
 * change on the continuation, after the turn that asked, which is the one undone.)
 */
function markUndone(messageId, clicked) {
  const turns = [...$("#log").querySelectorAll(".message")];
  const at = turns.findIndex((turn) => turn.dataset.messageId === messageId);
  const undone = at >= 0 ? turns.slice(at).filter((turn) => turn.dataset.changed) : [clicked];
  for (const turn of undone) {
    if (turn.dataset.undone) continue;
    turn.dataset.undone = "true";
    badge(turn, "undone", "undone", "Its changes were taken back");
  }
}

async function undoTurn(button) {
  button.disabled = true;
  try {
    const undone = await state.api.undo(state.sessionId);
    markUndone(undone.message_id, button.closest(".message"));
    notice(undone.summary);
    placeUndo();
    $("#message").focus(); // the button moved away
    refreshTasks();
  } catch (error) {
    button.disabled = false;
    if (error instanceof ApiError && error.status === 401) showError(error);
    else notice(describe(error), { kind: "problem" });
  }
}

// ---------------------------------------------------------------- sessions and turns

function showHistoryMessage(stored) {
  const message = addMessage(stored.role, stored.content ?? "");
  message.dataset.messageId = stored.id;
  if (stored.using_stub) markStub(message);
  const results = new Map((stored.tool_results ?? []).map((r) => [r.tool_call_id, r]));
  for (const call of stored.tool_calls ?? []) {
    const result = results.get(call.id);
    const held = result?.result?.status === "pending_approval" ? result.result : null;
    if (held) {
      approvalCard(message, { id: held.approval_id, summary: held.summary });
    } else if (result?.approval) {
      // Answered: the stored record keeps the answer, not the question's summary.
      const summary = outcomeOf(result) === "approved" ? activityText(call, result) : callLabel(call);
      settleCard(approvalCard(message, { id: result.approval.id, summary }), outcomeOf(result), result.approval.reason);
    } else {
      showActivity(message, call, result);
    }
  }
  if (changedTasks(stored.tool_results)) message.dataset.changed = "true";
}

export function newChat() {
  state.sessionId = null;
  clearLog();
  $("#log").append(el("p", { className: "empty", text: "New chat. Ask me to add, list, complete or delete tasks." }));
  markActiveSession();
}

async function openSession(sessionId) {
  try {
    const page = await state.api.messages(sessionId);
    state.sessionId = sessionId;
    clearLog();
    page.data.forEach(showHistoryMessage);
    placeUndo();
    markActiveSession();
    showView("chat");
  } catch (error) {
    showError(error);
  }
}

/**
 * One turn, streamed into a new answer: `message` (what was typed; it leaves the box once
 * the service has stored it) and/or `approvals` (answers to held calls). Resolves with
 * nothing, or with the error it showed.
 */
async function runTurn({ message, approvals }) {
  clearError();
  state.busy = true;
  $("#send").disabled = true;
  let answer = null;
  const calls = new Map();
  try {
    const done = await state.api.chat(
      { message, approvals, sessionId: state.sessionId, timezone: timezone() },
      (name, data) => {
        if (name === "session") {
          state.sessionId = data.session_id;
          if (message !== undefined) {
            addMessage("user", message);
            $("#message").value = "";
          }
          answer = addMessage("assistant");
          answer.classList.add("streaming");
        } else if (name === "delta") {
          answer.querySelector(".text").append(data.text);
          answer.scrollIntoView({ block: "end" });
        } else if (name === "approval_request") {
          approvalCard(answer, data);
        } else if (name === "tool_call") {
          // A held call answered now (by Approve / Deny, or a typed yes or no) has an approval_id.
          const summary = data.approval_id ? cardOf(data.approval_id)?.dataset.summary : undefined;
          calls.set(data.id, { ...data, summary });
          showActivity(answer, calls.get(data.id), null);
        } else if (name === "tool_result") {
          const call = calls.get(data.tool_call_id) ?? { id: data.tool_call_id, name: data.name };
          showActivity(answer, call, data);
          if (call.approval_id) settleCard(cardOf(call.approval_id), outcomeOf(data), data.result?.reason);
          refreshTasks();
        }
      },
    );
    answer ??= addMessage("assistant");
    answer.dataset.messageId = done.message_id;
    answer.querySelector(".text").textContent = done.response;
    if (done.using_stub) markStub(answer);
    for (const held of done.pending_approvals ?? []) approvalCard(answer, held);
    if (changedTasks(done.tool_results)) {
      answer.dataset.changed = "true";
      placeUndo();
    }
    refreshSessions();
    if (done.tool_calls.length) refreshTasks();
    return null;
  } catch (error) {
    if (error.accepted) refreshSessions();
    if (error instanceof ApiError && error.status === 404 && !error.accepted) {
      newChat(); // the session was deleted elsewhere; sending again starts a new one
    }
    showError(error);
    return error;
  } finally {
    answer?.classList.remove("streaming");
    state.busy = false;
    $("#send").disabled = false;
    $("#message").focus();
  }
}

async function onSend(event) {
  event?.preventDefault();
  const text = $("#message").value;
  if (!text.trim() || state.busy) return;
  await runTurn({ message: text });
}

function onComposerKey(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    onSend();
  }
}
// ---------------------------------------------------------------- past sessions

function markActiveSession() {
  for (const item of document.querySelectorAll("#session-list > li")) {
    const active = item.dataset.id === state.sessionId;
    item.classList.toggle("active", active);
    item.querySelector(".open")?.setAttribute("aria-current", active ? "true" : "false");
  }
}

function sessionItem(session) {
  const item = el("li", { attrs: { "data-id": session.id } });
  const open = el("button", { className: "open", attrs: { type: "button", "aria-label": `Open session: ${session.title}` } }, [
    el("span", { className: "title", text: session.title || "Untitled" }),
    el("time", { text: dateTime.format(new Date(session.updated_at)), attrs: { datetime: session.updated_at } }),
  ]);
  open.addEventListener("click", () => openSession(session.id));
  const rename = el("button", {
    className: "icon",
    text: "✎",
    attrs: { type: "button", "aria-label": `Rename session: ${session.title}`, title: "Rename" },
  });
  rename.addEventListener("click", () => startRename(item, session));
  const remove = el("button", {
    className: "icon delete",
    text: "✕",
    attrs: { type: "button", "aria-label": `Delete session: ${session.title}`, title: "Delete" },
  });
  remove.addEventListener("click", async () => {
    if (!confirm(`Delete the session “${session.title}” and its messages?`)) return;
    try {
      await state.api.deleteSession(session.id);
      if (state.sessionId === session.id) newChat();
    } catch (error) {
      showError(error);
    }
    refreshSessions();
  });
  item.append(open, rename, remove);
  return item;
}

function startRename(item, session) {
  const input = el("input", { attrs: { "aria-label": "New session title", maxlength: "200" } });
  input.value = session.title;
  const form = el("form", { className: "rename" }, [input, el("button", { text: "Save", attrs: { type: "submit" } })]);
  const done = () => refreshSessions();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await state.api.renameSession(session.id, input.value);
    } catch (error) {
      showError(error);
    }
    done();
  });
  input.addEventListener("keydown", (event) => event.key === "Escape" && done());
  item.replaceChildren(form);
  input.focus();
  input.select();
}

export async function refreshSessions(more = false) {
  if (!state.api) return;
  try {
    const page = await state.api.sessions(more ? state.sessionsCursor : null);
    const items = page.data.map(sessionItem);
    if (more) $("#session-list").append(...items);
    else $("#session-list").replaceChildren(...items);
    state.sessionsCursor = page.next_cursor;
    $("#more-sessions").hidden = !page.next_cursor;
    markActiveSession();
  } catch (error) {
    showError(error);
  }
}

export function startChat() {
  $("#composer").addEventListener("submit", onSend);
  $("#message").addEventListener("keydown", onComposerKey);
  $("#new-chat").addEventListener("click", () => {
    newChat();
    showView("chat");
    $("#message").focus();
  });
  $("#more-sessions").addEventListener("click", () => refreshSessions(true));
}
