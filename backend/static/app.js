// The chat page. Everything it shows that came from a person or the model is set with
// textContent, never parsed as HTML.
import { Api, ApiError, devToken, tokenSubject } from "./api.js";

const STORAGE_KEY = "todo-agent.session"; // sessionStorage: this tab only
const $ = (selector) => document.querySelector(selector);

const state = {
  api: null,
  user: null, // {userId, name}
  owner: null, // whose conversation the page shows
  sessionId: null,
  sessionsCursor: null,
  busy: false,
  retryTimer: null,
  expanded: new Set(), // ids of tasks whose steps are shown
  refocus: null, // a selector in the task list to focus once it is drawn again
  draft: null, // {key, value}: what was typed in a box of the task list, kept across a redraw
  live: null, // the event stream: {controller, lastEventId}
  editing: null, // the task in the editor
  lists: [], // the user's lists, the Inbox first, each with the user's role
  listsReady: null, // a promise: the lists are known (the task list's controls follow the role)
  listId: null, // the list the task list shows; null: all tasks
  members: new Map(), // list id -> its members, for assignees' names (shared lists)
  sharing: null, // the list whose share dialog is open
  invitation: null, // the invite link made in the share dialog: {listId, token}
  leaving: null, // the list the user is leaving: no "you were removed" notice for it
  viewing: null, // the document open in the viewer
};

function el(tag, { className, text, attrs } = {}, children = []) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  for (const [name, value] of Object.entries(attrs ?? {})) node.setAttribute(name, value);
  node.append(...children);
  return node;
}

const timezone = () => Intl.DateTimeFormat().resolvedOptions().timeZone;
const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
const dateOnly = new Intl.DateTimeFormat(undefined, { dateStyle: "medium" });

// ---------------------------------------------------------------- errors

function describe(error) {
  if (!(error instanceof ApiError)) return `Something went wrong: ${error.message}`;
  const detail = typeof error.detail === "string" ? error.detail : null;
  switch (error.status) {
    case 0:
      return "Cannot reach the service. Check your connection, then try again.";
    case 401:
      return "Your sign-in has expired or is not valid. Please sign in again.";
    case 403: // a viewer's write says which list and role; a foreign path says so too
      return detail ?? "This token belongs to another user.";
    case 404:
      return `${detail ?? "Not found."} It may have been deleted elsewhere.`;
    case 409: // the service says which conflict: a busy chat, nothing to undo, ...
      return detail ?? "This chat is still busy with another message. Wait for it to answer, then send again.";
    case 413:
      return "That message is too large.";
    case 422:
      return detail ?? "The service could not accept that input.";
    case 429:
      return "You are sending messages too quickly.";
    case 503:
      return "The service is temporarily unavailable.";
    default:
      return detail ?? `The service answered with an error (${error.status}).`;
  }
}

function showError(error) {
  clearInterval(state.retryTimer);
  const box = $("#error");
  const message = describe(error);
  box.hidden = false;
  if (error instanceof ApiError && error.status === 401) {
    box.textContent = message;
    signOut(message);
    return;
  }
  let wait = error instanceof ApiError ? error.retryAfter : null;
  if (!wait) {
    box.textContent = message;
    return;
  }
  const tick = () => {
    box.textContent = wait > 0 ? `${message} Try again in ${wait} s.` : `${message} You can try again now.`;
    if (wait-- <= 0) clearInterval(state.retryTimer);
  };
  tick();
  state.retryTimer = setInterval(tick, 1000);
}

function clearError() {
  clearInterval(state.retryTimer);
  $("#error").hidden = true;
  $("#error").textContent = "";
}

// ---------------------------------------------------------------- sign-in

function signOut(reason = "") {
  stopFollowing();
  if ($("#settings").open) $("#settings").close();
  if ($("#task-editor").open) $("#task-editor").close();
  if ($("#document-viewer").open) $("#document-viewer").close();
  $("#document-list").replaceChildren();
  forgetLists();
  sessionStorage.removeItem(STORAGE_KEY);
  state.api = null;
  state.user = null;
  $("#app").hidden = true;
  $(".who").hidden = true;
  $(".views").hidden = true;
  $("#sign-in").hidden = false;
  $("#sign-in-reason").textContent = reason;
  const devSignIn = document.documentElement.dataset.devSignIn === "on";
  $("#name-form").hidden = !devSignIn;
  (devSignIn ? $("#name-input") : $("#token-input")).focus();
}

function signIn({ token, userId, name }) {
  sessionStorage.setItem(STORAGE_KEY, JSON.stringify({ token, userId, name }));
  state.api = new Api({ token, userId });
  state.user = { userId, name };
  $("#sign-in").hidden = true;
  $("#app").hidden = false;
  $(".who").hidden = false;
  $(".views").hidden = false;
  $("#who-name").textContent = name;
  $("#sign-out").title = `Signed in as ${name}`;
  // Signed in again after an expired token: the same person goes on where they were.
  if (state.owner !== userId) newChat();
  state.owner = userId;
  state.listsReady = refreshLists();
  refreshTasks();
  refreshDocuments();
  refreshSessions();
  follow();
  $("#message").focus();
  acceptInviteFromAddress();
}

async function onNameSubmit(event) {
  event.preventDefault();
  try {
    const minted = await devToken($("#name-input").value);
    signIn({ token: minted.token, userId: minted.user_id, name: minted.name });
  } catch (error) {
    $("#sign-in-reason").textContent =
      error instanceof ApiError && error.status === 404
        ? "Sign-in by name is not offered by this server; use a bearer token."
        : describe(error);
  }
}

function onTokenSubmit(event) {
  event.preventDefault();
  const token = $("#token-input").value.trim();
  try {
    signIn({ token, ...tokenSubject(token) });
    $("#token-input").value = "";
  } catch {
    $("#sign-in-reason").textContent = "That is not a JWT (three base64url parts with a sub).";
  }
}

// ---------------------------------------------------------------- chat log

/** Statuses of tool results that changed tasks: the service can undo such a turn. */
const CHANGES = new Set(["created", "updated", "completed", "reopened", "deleted", "restored", "purged"]);

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

function newChat() {
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

// ---------------------------------------------------------------- tasks

function dueLabel(task) {
  if (!task.due_at) return null;
  const due = new Date(task.due_at);
  // A due date without a time of day is stored as the end of that day: show it as a date.
  const endOfDay = due.getHours() === 23 && due.getMinutes() === 59;
  return (endOfDay ? dateOnly : dateTime).format(due);
}

const WEEKDAYS = ["SU", "MO", "TU", "WE", "TH", "FR", "SA"];
const weekdayName = new Intl.DateTimeFormat(undefined, { weekday: "long" });

/** A selector for one control of one task, stable across redraws. */
const focusKey = (task, part) => `[data-focus="${CSS.escape(`${task.id}:${part}`)}"]`;

function taskItem(task, { step = false } = {}) {
  const overdue = !task.completed && task.due_at && new Date(task.due_at) < new Date();
  const kind = step ? "step" : "task";
  const writable = canWrite(task.list_id); // a viewer's list shows its tasks, no controls
  const check = el("input", {
    attrs: {
      type: "checkbox",
      "aria-label": `${task.completed ? "Reopen" : "Complete"} ${kind} ${task.number}: ${task.title}`,
      "data-focus": `${task.id}:check`,
    },
  });
  check.checked = task.completed;
  check.disabled = !writable;
  if (!writable) check.title = "You can view this list, not change it";
  check.addEventListener("change", () => {
    state.refocus = focusKey(task, "check"); // keep the keyboard's place
    changeTask(async () => {
      const changed = await state.api.completeTask(task.id, check.checked);
      if (changed.next) announceNext(changed.next);
    });
  });
  const remove = el("button", {
    className: "icon delete",
    text: "✕",
    attrs: {
      type: "button",
      "aria-label": `Delete ${kind} ${task.number}: ${task.title}`,
      title: "Delete",
      "data-focus": `${task.id}:delete`,
    },
  });
  remove.addEventListener("click", () => changeTask(() => state.api.deleteTask(task.id)));
  const meta = el("div", { className: "meta" });
  if (task.steps_total) {
    meta.append(el("span", { className: "progress", text: `${task.steps_done}/${task.steps_total} steps` }));
  }
  if (task.priority !== "medium") meta.append(el("span", { className: `badge priority ${task.priority}`, text: task.priority }));
  const due = dueLabel(task);
  if (due) meta.append(el("span", { className: "due", text: `${overdue ? "Overdue · " : "Due "}${due}` }));
  if (task.recurrence_text) {
    meta.append(el("span", { className: "repeat", attrs: { title: "Repeats" } }, [
      el("span", { text: "↻ ", attrs: { "aria-hidden": "true" } }),
      task.recurrence_text,
    ]));
  }
  if (task.remind_at && !task.completed) {
    const fired = Boolean(task.reminded_at);
    meta.append(el("span", {
      className: fired ? "remind fired" : "remind",
      text: `${fired ? "Reminded" : "Reminder"} ${dateTime.format(new Date(task.remind_at))}`,
      attrs: { title: fired ? "The reminder has fired" : "A reminder shows on this page then" },
    }));
  }
  for (const tag of task.tags ?? []) meta.append(el("span", { className: "tag", text: `#${tag}` }));
  meta.append(...listMeta(task));
  const title = el("span", { className: "title", text: task.title });
  const number = el("span", { className: "number", text: `${task.number}` });
  const body = el("div", { className: "body" }, [el("div", {}, [number, title]), meta]);
  const row = el("div", { className: "row" }, [check, body]);
  if (!step && (writable || task.steps_total)) row.append(expander(task));
  if (!step && writable) row.append(editButton(task));
  if (writable) row.append(remove);
  const item = el("li", { className: step ? "task step" : "task", attrs: { "data-id": task.id, "data-list": task.list_id } }, [row]);
  item.classList.toggle("done", task.completed);
  item.classList.toggle("overdue", Boolean(overdue));
  if (!step && state.expanded.has(task.id)) showSteps(item, task);
  return item;
}

/** The button that shows or hides a task's steps (and a box to add one). */
function expander(task) {
  const open = state.expanded.has(task.id);
  const button = el("button", {
    className: "icon expand",
    text: open ? "▾" : "▸",
    attrs: {
      type: "button",
      "aria-expanded": String(open),
      "aria-label": `${task.steps_total ? "Steps of" : "Add steps to"} task ${task.number}: ${task.title}`,
      title: task.steps_total ? "Steps" : "Add steps",
      "data-focus": `${task.id}:expand`,
    },
  });
  button.addEventListener("click", () => {
    if (state.expanded.has(task.id)) state.expanded.delete(task.id);
    else state.expanded.add(task.id);
    state.refocus = focusKey(task, "expand"); // keep the keyboard's place
    refreshTasks();
  });
  return button;
}

function editButton(task) {
  const button = el("button", {
    className: "icon edit",
    text: "✎",
    attrs: {
      type: "button",
      "aria-haspopup": "dialog",
      "aria-label": `Edit task ${task.number}: ${task.title}`,
      title: "Edit, repeat, remind",
      "data-focus": `${task.id}:edit`,
    },
  });
  button.addEventListener("click", () => openEditor(task));
  return button;
}

async function showSteps(item, task) {
  const list = el("ul", { className: "steps", attrs: { "aria-label": `Steps of task ${task.number}` } });
  item.append(list);
  try {
    const full = await state.api.task(task.id);
    list.replaceChildren(...full.steps.map((s) => taskItem(s, { step: true })));
  } catch (error) {
    showError(error);
  }
  // Redrawn again while the steps were on their way: the newer drawing restores the focus
  // and what was being typed; this one, no longer on the page, must not use them up.
  if (!item.isConnected || !canWrite(task.list_id)) return;
  const input = el("input", {
    attrs: {
      "aria-label": `New step for task ${task.number}`,
      placeholder: "Add a step",
      maxlength: "200",
      "data-focus": `${task.id}:add-step`,
    },
  });
  const form = el("form", { className: "add-step" }, [input, el("button", { text: "Add", attrs: { type: "submit" } })]);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!input.value.trim()) return;
    state.refocus = focusKey(task, "add-step"); // ready for the next step
    changeTask(() => state.api.addStep(task.id, input.value.trim()));
  });
  item.append(form);
  focusPending(item);
}

/** Focus what state.refocus names once it is drawn (steps are drawn a moment after their task). */
function focusPending(container) {
  // Only focus that the redraw itself took away: never pull it from where the person moved it.
  if (document.activeElement && document.activeElement !== document.body) state.refocus = null;
  const target = state.refocus && container.querySelector(state.refocus);
  if (!target) return;
  if (state.draft?.key === target.dataset.focus) target.value = state.draft.value;
  target.focus();
  state.refocus = null;
  state.draft = null;
}

/** Before a redraw: remember which control of the list has focus (and what it holds). */
function keepFocus(list) {
  const focused = document.activeElement;
  if (state.refocus || !focused?.dataset.focus || !list.contains(focused)) return;
  state.refocus = `[data-focus="${CSS.escape(focused.dataset.focus)}"]`;
  const typed = focused.tagName === "INPUT" && focused.type !== "checkbox";
  state.draft = typed ? { key: focused.dataset.focus, value: focused.value } : null;
}

let tasksRequest = 0;
let drawnTasks = null; // what the task list was last drawn from
const minute = () => Math.floor(Date.now() / 60000);
async function refreshTasks({ live = false } = {}) {
  if (!state.api) return;
  const ticket = ++tasksRequest; // only the latest answer is drawn
  const filter = $("#task-filter").value;
  const trash = filter === "trash";
  $("#trash-head").hidden = !trash;
  drawListBar();
  try {
    const page = trash ? await state.api.trash() : await state.api.tasks(filter, state.listId);
    await state.listsReady; // each task's controls follow the user's role in its list
    if (ticket !== tasksRequest) return;
    const list = $("#task-list");
    // A live refresh (the event stream) that finds the list as it is drawn leaves it alone:
    // redrawing would take a step's checkbox away from under a key being pressed while the
    // steps are fetched again. The minute is in it, so "overdue" and "today" still move on.
    // The person's own actions always redraw (a refused change puts its checkbox back).
    const drawing = JSON.stringify([filter, state.listId, [...state.expanded], listsSignature(), page, minute()]);
    // Nothing redrawn took the focus away: a pending refocus is for the redraw to come.
    if (live && drawing === drawnTasks && list.childElementCount) return;
    drawnTasks = drawing;
    keepFocus(list); // a redraw from elsewhere (the event stream) keeps the keyboard's place
    list.replaceChildren(...page.data.map((task) => (trash ? trashItem(task) : taskItem(task))));
    if (!page.data.length) {
      list.append(el("li", { className: "empty", text: trash ? "The trash is empty." : "No tasks here yet." }));
    }
    // The trash has pages, not a count: "(100+)" when there are more.
    $("#task-count").textContent = trash ? `(${page.data.length}${page.next_cursor ? "+" : ""})` : `(${page.count})`;
    $("#empty-trash").disabled = trash && !page.data.length;
    focusPending(list);
    if (state.refocus === "#task-filter") {
      $("#task-filter").focus(); // the last one went: the keyboard lands on the list's heading
      state.refocus = null;
    }
  } catch (error) {
    if (ticket === tasksRequest && listGone(error)) return;
    showError(error);
  }
}

/** A task in the trash: when it went, and Restore or Delete forever. */
function trashItem(task) {
  const item = el("li", { className: "task trashed", attrs: { "data-id": task.id } });
  const restore = el("button", {
    text: "Restore",
    attrs: { type: "button", "aria-label": `Restore task ${task.number}: ${task.title}`, "data-focus": `${task.id}:restore` },
  });
  restore.addEventListener("click", () => trashChange(item, () => state.api.restoreTask(task.id)));
  const purge = el("button", {
    className: "danger",
    text: "Delete forever",
    attrs: { type: "button", "aria-label": `Delete task ${task.number} forever: ${task.title}`, "data-focus": `${task.id}:purge` },
  });
  purge.addEventListener("click", () => {
    if (!confirm(`Delete task ${task.number} “${task.title}” for good? It cannot be restored.`)) return;
    trashChange(item, () => state.api.purgeTask(task.id));
  });
  const meta = el("div", { className: "meta" }, [
    el("span", { className: "deleted", text: `Deleted ${dateTime.format(new Date(task.deleted_at))}` }),
  ]);
  if (task.steps_total) meta.append(el("span", { className: "progress", text: `with ${task.steps_total} steps` }));
  const title = el("div", {}, [el("span", { className: "number", text: `${task.number}` }), el("span", { className: "title", text: task.title })]);
  item.append(el("div", { className: "row" }, [el("div", { className: "body" }, [title, meta])]), el("div", { className: "actions" }, [restore, purge]));
  return item;
}

/** Restore or purge one: the keyboard goes on to the next task in the trash. */
function trashChange(item, change) {
  const next = item.nextElementSibling ?? item.previousElementSibling;
  state.refocus = next?.dataset.id ? `[data-focus="${CSS.escape(`${next.dataset.id}:restore`)}"]` : "#task-filter";
  changeTask(change);
}

async function emptyTrash() {
  const count = $("#task-list").querySelectorAll(".trashed").length;
  const more = $("#task-count").textContent.includes("+") ? " and more" : "";
  if (!confirm(`Empty the trash? Its ${count}${more} tasks are deleted for good and cannot be restored.`)) return;
  await changeTask(() => state.api.emptyTrash());
  $("#task-filter").focus(); // the button is disabled now: nothing left to empty
}

async function changeTask(change) {
  try {
    await change();
  } catch (error) {
    showError(error);
  }
  refreshTasks();
}

// ---------------------------------------------------------------- documents

const KIB = 1024;
const documentSize = (bytes) =>
  bytes < KIB ? `${bytes} B` : bytes < KIB * KIB ? `${Math.round(bytes / KIB)} KB` : `${(bytes / KIB / KIB).toFixed(1)} MB`;

/** Where a document added now goes: the list on show if the user may add to it, else the Inbox. */
const documentTarget = () => (state.listId && canWrite(state.listId) ? state.listId : null);

let documentsRequest = 0;
/** The documents of the list on show (all the user reads when no list is chosen). */
async function refreshDocuments() {
  if (!state.api) return;
  const ticket = ++documentsRequest;
  const trash = $("#task-filter").value === "trash";
  $("#documents").hidden = trash;
  if (trash) return;
  try {
    const page = await state.api.documents(state.listId);
    await state.listsReady; // what the user may do follows their role in each list
    if (ticket !== documentsRequest) return;
    $("#document-list").replaceChildren(...page.data.map(documentItem));
    $("#document-count").textContent = `(${page.data.length})`;
    $("#document-pick").hidden = Boolean(state.listId && !canWrite(state.listId));
  } catch (error) {
    if (ticket === documentsRequest && !listGone(error)) documentProblem(error);
  }
}

function documentItem(doc) {
  const open = el("button", {
    className: "open link",
    text: doc.title,
    attrs: { type: "button", "aria-label": `Read ${doc.title}`, "data-document": doc.id },
  });
  open.addEventListener("click", () => openDocument(doc.id));
  const item = el("li", { attrs: { "data-id": doc.id } }, [open, el("span", { className: "size", text: documentSize(doc.bytes) })]);
  if (canWrite(doc.list_id)) {
    const remove = el("button", { className: "icon", text: "✕", attrs: { type: "button", "aria-label": `Delete ${doc.title}` } });
    remove.addEventListener("click", () => deleteDocument(doc));
    item.append(remove);
  }
  return item;
}

/** A refused document says the service's reason (too large, not what it says it is, ...). */
function documentProblem(error) {
  if (!(error instanceof ApiError) || [0, 401, 429, 503].includes(error.status)) return showError(error);
  $("#documents-error").textContent = typeof error.detail === "string" ? error.detail : describe(error);
  $("#documents-error").hidden = false;
}

/** Files chosen or dropped: each becomes a document; a refused one says why. */
async function uploadDocuments(files) {
  $("#documents-error").hidden = true;
  for (const file of files) {
    try {
      const added = await state.api.uploadDocument(file, documentTarget());
      notice(`Added the document “${added.title}”.`);
    } catch (error) {
      documentProblem(error);
    }
  }
  refreshDocuments();
}

/** The document in the viewer, as text: whatever markup it holds is shown, never run. */
async function openDocument(id) {
  $("#document-error").hidden = true;
  try {
    const doc = await state.api.document(id);
    state.viewing = doc;
    $("#document-title").textContent = doc.title;
    $("#document-meta").textContent = `${doc.media_type}, ${documentSize(doc.bytes)}, ${listOf(doc.list_id)?.name ?? ""}`;
    $("#document-text").textContent = doc.text;
    $("#document-delete").hidden = !canWrite(doc.list_id);
    if (!$("#document-viewer").open) $("#document-viewer").showModal();
  } catch (error) {
    documentProblem(error);
  }
}

async function deleteDocument(doc) {
  if (!confirm(`Delete the document “${doc.title}”? It cannot be restored.`)) return;
  try {
    await state.api.deleteDocument(doc.id);
    if (state.viewing?.id === doc.id) $("#document-viewer").close();
  } catch (error) {
    if ($("#document-viewer").open) {
      $("#document-error").textContent = describe(error);
      $("#document-error").hidden = false;
    } else documentProblem(error);
  }
  refreshDocuments();
}

/** document.* events: the list follows; a document deleted elsewhere leaves the viewer. */
function onDocumentEvent(type, data) {
  if (type === "document.deleted" && state.viewing?.id === data.document_id && $("#document-viewer").open) {
    $("#document-viewer").close();
    notice(`“${data.title}” was deleted.`);
  }
  refreshDocuments();
}

const carriesFiles = (event) => [...(event.dataTransfer?.types ?? [])].includes("Files");

function startDocuments() {
  $("#document-file").addEventListener("change", (event) => {
    uploadDocuments([...event.target.files]);
    event.target.value = ""; // choosing the same file again is a change too
  });
  $("#document-delete").addEventListener("click", () => state.viewing && deleteDocument(state.viewing));
  $("#document-viewer").addEventListener("close", () => (state.viewing = null));
  // A file dropped anywhere on the page is a document of the list on show.
  document.addEventListener("dragover", (event) => {
    if (!carriesFiles(event) || !state.api) return;
    event.preventDefault(); // lets the drop happen here rather than the browser opening the file
    document.body.classList.add("dropping");
  });
  document.addEventListener("dragleave", (event) => {
    if (event.relatedTarget === null) document.body.classList.remove("dropping");
  });
  document.addEventListener("drop", (event) => {
    document.body.classList.remove("dropping");
    if (!carriesFiles(event) || !state.api) return;
    event.preventDefault();
    uploadDocuments([...event.dataTransfer.files]);
  });
}

// ---------------------------------------------------------------- the task editor

/** A Date as the value of a datetime-local input (the browser's local time). */
function localInput(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** A datetime-local value as an absolute time (it is read in the browser's timezone). */
const fromLocalInput = (value) => (value ? new Date(value).toISOString() : null);

/** The day "every week" repeats on: the due day in the editor, else today. */
function weeklyRule() {
  const due = $("#edit-due").value;
  const day = due ? new Date(due) : new Date();
  $("#edit-repeat-weekly").textContent = `Every week on ${weekdayName.format(day)}`;
  return `FREQ=WEEKLY;BYDAY=${WEEKDAYS[day.getDay()]}`;
}

/** The rule the editor's choice stands for ("" for none). */
function chosenRule() {
  const choice = $("#edit-repeat").value;
  if (choice === "weekly") return weeklyRule();
  if (choice === "custom") return $("#edit-rule").value.trim().replace(/^RRULE:/i, "");
  return choice;
}

function showRuleBox() {
  $("#edit-rule-box").hidden = $("#edit-repeat").value !== "custom";
}

async function openEditor(task) {
  state.editing = task;
  $("#editor-error").hidden = true;
  $("#editor-title").textContent = `Edit task ${task.number}`;
  if (!(await fillListChoices(task))) return;
  $("#edit-title").value = task.title;
  $("#edit-due").value = localInput(task.due_at);
  $("#edit-remind").value = localInput(task.remind_at);
  const rule = task.recurrence ?? "";
  const weekly = weeklyRule(); // and names the day in its option
  const preset = [...$("#edit-repeat").options].some((option) => option.value === rule);
  const choice = preset ? rule : rule === weekly ? "weekly" : "custom";
  $("#edit-repeat").value = choice;
  $("#edit-rule").value = choice === "custom" ? rule : "";
  showRuleBox();
  $("#task-editor").showModal();
  $("#edit-title").focus();
}

/**
 * A 422's detail in plain words: a sentence as it is, pydantic's list of problems as the
 * first problem per field (`labels` names the fields).
 */
function inputProblem(error, labels, fallback) {
  if (!(error instanceof ApiError) || error.status !== 422 || !Array.isArray(error.detail)) return describe(error);
  const byField = new Map();
  for (const problem of error.detail) {
    const field = (problem.loc ?? []).find((part) => part in labels);
    const label = field ? labels[field] : fallback;
    // "Value error, ..." is how pydantic prefixes a validator's own message.
    if (!byField.has(label)) byField.set(label, String(problem.msg).replace(/^Value error, /, ""));
  }
  return [...byField].map(([label, msg]) => `${label}: ${msg}.`).join(" ");
}

const TASK_LABELS = {
  title: "Title",
  list_id: "List",
  assignee_id: "Assigned to",
  due_at: "Due",
  recurrence: "Repeat",
  remind_at: "Reminder",
};

async function onEditorSubmit(event) {
  event.preventDefault();
  const task = state.editing;
  const box = $("#editor-error");
  box.hidden = true;
  // Only what changed is sent: an unchanged rule or reminder is left exactly as it was.
  const changes = {};
  const title = $("#edit-title").value.trim();
  if (title !== task.title) changes.title = title;
  if ($("#edit-list").value !== task.list_id) changes.list_id = $("#edit-list").value;
  if ($("#edit-assignee").value !== (task.assignee_id ?? "")) changes.assignee_id = $("#edit-assignee").value || null;
  if ($("#edit-due").value !== localInput(task.due_at)) changes.due_at = fromLocalInput($("#edit-due").value);
  const rule = chosenRule();
  if (rule !== (task.recurrence ?? "")) changes.recurrence = rule || null;
  if ($("#edit-remind").value !== localInput(task.remind_at)) {
    changes.remind_at = fromLocalInput($("#edit-remind").value);
  }
  if (!Object.keys(changes).length) {
    $("#task-editor").close();
    return;
  }
  $("#editor-save").disabled = true;
  try {
    await state.api.updateTask(task.id, changes);
    $("#task-editor").close();
    refreshTasks();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      $("#task-editor").close();
      showError(error);
      return;
    }
    box.textContent = inputProblem(error, TASK_LABELS, "Task");
    box.hidden = false;
  } finally {
    $("#editor-save").disabled = false;
  }
}

// ---------------------------------------------------------------- lists

const ROLE_WORDS = {
  owner: "you own it",
  editor: "you can add and change its tasks",
  viewer: "you can view its tasks, not change them",
};

const listOf = (id) => state.lists.find((list) => list.id === id) ?? null;

/** Whether the user may change a list's tasks: its owner or an editor (the service decides). */
const canWrite = (listId) => ["owner", "editor"].includes(listOf(listId)?.role);

/** A list action refused: in the live region (an expired sign-in signs out). */
function listProblem(error) {
  if (error instanceof ApiError && error.status === 401) showError(error);
  else notice(describe(error), { kind: "problem" });
}

/** A member as the page names them: "you", or their display name. */
function memberName(listId, userId) {
  if (userId === state.user?.userId) return "you";
  const member = state.members.get(listId)?.find((m) => m.user_id === userId);
  return member?.display_name ?? userId;
}

/** What a task shows of its list: who it is assigned to, and (in all tasks) the list. */
function listMeta(task) {
  const meta = [];
  if (task.assignee_id) {
    const who = memberName(task.list_id, task.assignee_id);
    meta.push(el("span", { className: "assignee", text: `Assigned to ${who}` }));
  }
  const list = listOf(task.list_id);
  if (!state.listId && list && !list.inbox) meta.push(el("span", { className: "in-list", text: list.name, attrs: { title: "List" } }));
  return meta;
}

/** A list's members, fresh; kept for the names of assignees. */
async function loadMembers(listId) {
  const members = (await state.api.members(listId)).data;
  state.members.set(listId, members);
  return members;
}

/** What the task list draws from the lists (names, roles, members): redrawn when it changes. */
function listsSignature() {
  const members = [...state.members].sort(([a], [b]) => a.localeCompare(b));
  return JSON.stringify([state.lists.map((list) => [list.id, list.name, list.role]), members]);
}

let listsRequest = 0;
/** The sidebar from the service (Inbox first, then own and shared lists, with pending counts). */
async function refreshLists() {
  if (!state.api) return;
  const ticket = ++listsRequest;
  const before = state.lists.length ? listsSignature() : null; // null: the first drawing
  try {
    const { data } = await state.api.lists();
    const unknown = data.filter((list) => list.shared && !state.members.has(list.id));
    await Promise.all(unknown.map((list) => loadMembers(list.id).catch(() => null)));
    if (ticket !== listsRequest) return;
    state.lists = data;
    if (state.listId && !listOf(state.listId)) state.listId = null; // lost meanwhile
    drawLists();
    if (before !== null && before !== listsSignature()) refreshTasks();
  } catch (error) {
    showError(error);
  }
}

function drawLists() {
  const nav = $("#list-nav");
  const focused = nav.contains(document.activeElement) ? document.activeElement.dataset.focus : null;
  nav.replaceChildren(listNavItem(null), ...state.lists.map(listNavItem));
  if (focused) nav.querySelector(`[data-focus="${CSS.escape(focused)}"]`)?.focus();
  drawListBar();
}

/** "All tasks" (null) or a list: its name, a shared / role marker, its pending count. */
function listNavItem(list) {
  const id = list?.id ?? null;
  const marker = !list ? null : list.role !== "owner" ? list.role : list.shared ? "shared" : null;
  const button = el("button", {
    className: "open",
    attrs: { type: "button", "aria-current": String(id === state.listId), "data-focus": `list:${id ?? "all"}` },
  }, [el("span", { className: "name", text: list ? list.name : "All tasks" })]);
  if (list) {
    const shared = marker === "shared" ? "shared" : marker ? `shared with you, ${marker}` : null;
    button.setAttribute("aria-label", `${list.name}${shared ? ` (${shared})` : ""}, ${list.pending_count} pending`);
    if (marker) button.append(el("span", { className: `badge role ${marker}`, text: marker }));
    button.append(el("span", { className: "pending", text: String(list.pending_count), attrs: { title: "Pending tasks" } }));
  }
  button.addEventListener("click", () => selectList(id));
  return el("li", { className: id === state.listId ? "active" : "" }, [button]);
}

/** Show one list's tasks (null: all of them). */
function selectList(listId) {
  state.listId = listId;
  if ($("#task-filter").value === "trash") $("#task-filter").value = "all"; // the trash has no lists
  hideRename();
  drawLists();
  refreshTasks();
  refreshDocuments();
}

/** Above the tasks: the list's name, the user's role, and what they may do with it. */
function drawListBar() {
  const list = listOf(state.listId);
  const trash = $("#task-filter").value === "trash";
  $("#tasks-name").textContent = trash ? "Trash" : (list?.name ?? "Tasks");
  $("#list-bar").hidden = trash || !list;
  $("#add-task").hidden = trash || Boolean(list && !canWrite(list.id));
  const inbox = state.lists.find((l) => l.inbox)?.name ?? "Inbox";
  $("#new-task").placeholder = `Add a task to ${list?.name ?? inbox}`;
  if (!list) return;
  const owner = list.role === "owner";
  const whose = owner ? (list.shared ? "Shared by you" : "Your list") : "Shared with you";
  $("#list-role").textContent = list.inbox
    ? "Your Inbox: new tasks land here unless you choose a list. It is never shared."
    : `${whose}: ${ROLE_WORDS[list.role]}.`;
  $("#share-list").hidden = list.inbox;
  $("#share-list").textContent = owner ? "Share" : "Members";
  $("#rename-list").hidden = !owner || list.inbox;
  $("#delete-list").hidden = !owner || list.inbox;
  $("#leave-list").hidden = owner;
}

/** A list the user lost (deleted, left, removed): out of the sidebar and the task list at once. */
function dropList(listId) {
  state.lists = state.lists.filter((list) => list.id !== listId);
  state.members.delete(listId);
  if (state.sharing === listId && $("#share").open) $("#share").close();
  if (state.listId === listId) state.listId = null;
  for (const item of $("#task-list").querySelectorAll(`[data-list="${CSS.escape(listId)}"]`)) item.remove();
  if (state.viewing?.list_id === listId && $("#document-viewer").open) $("#document-viewer").close();
  drawLists();
  refreshTasks();
  refreshDocuments();
}

/** The list on show answered 404 (gone elsewhere): show all tasks instead. */
function listGone(error) {
  if (!(error instanceof ApiError) || error.status !== 404 || !state.listId) return false;
  dropList(state.listId);
  refreshLists();
  return true;
}

/** list.* events: members change (names of assignees); a lost list goes at once. */
function onListEvent(type, data) {
  const list = data.list;
  state.members.delete(list.id);
  const me = state.user?.userId;
  const lost = type === "list.deleted" || (type === "list.member_removed" && data.member?.user_id === me);
  if (!lost) {
    if (state.sharing === list.id && $("#share").open) reloadMembers();
    return;
  }
  if (state.leaving === list.id) state.leaving = null;
  else if (list.owner_id !== me) {
    const why = type === "list.deleted" ? `“${list.name}” was deleted by its owner.` : `You are no longer a member of “${list.name}”.`;
    notice(why, { kind: "problem" });
  }
  dropList(list.id);
}

function forgetLists() {
  if ($("#share").open) $("#share").close();
  state.lists = [];
  state.listId = null;
  state.listsReady = null;
  state.members.clear();
  $("#list-nav").replaceChildren();
}

function toggleNewList(open) {
  $("#new-list-form").hidden = !open;
  $("#new-list").setAttribute("aria-expanded", String(open));
  $("#lists-error").hidden = true;
  $("#new-list-name").value = "";
  if (open) $("#new-list-name").focus();
}

async function onNewList(event) {
  event.preventDefault();
  const name = $("#new-list-name").value.trim();
  if (!name) return;
  try {
    const list = await state.api.createList(name);
    toggleNewList(false);
    await refreshLists();
    selectList(list.id);
    $("#new-task").focus(); // ready for its first task
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return showError(error);
    $("#lists-error").textContent = inputProblem(error, { name: "Name" }, "List"); // 409: the name is taken
    $("#lists-error").hidden = false;
  }
}

async function onAddTask(event) {
  event.preventDefault();
  const title = $("#new-task").value.trim();
  if (!title) return;
  try {
    await state.api.addTask({ title, list_id: state.listId ?? undefined });
    $("#new-task").value = "";
  } catch (error) {
    listProblem(error); // a viewer's list: the service's reason
  }
  refreshTasks();
}

function showRename() {
  $("#rename-list-name").value = listOf(state.listId)?.name ?? "";
  $("#rename-list-form").hidden = false;
  $(".list-actions").hidden = true;
  $("#rename-list-name").select();
  $("#rename-list-name").focus();
}

function hideRename(refocus = false) {
  $("#rename-list-form").hidden = true;
  $(".list-actions").hidden = false;
  if (refocus) $("#rename-list").focus();
}

async function onRenameList(event) {
  event.preventDefault();
  try {
    await state.api.renameList(state.listId, $("#rename-list-name").value.trim());
    hideRename(true);
    await refreshLists();
  } catch (error) {
    listProblem(error); // 409: a name the user has already
  }
}

async function deleteList() {
  const list = listOf(state.listId);
  const others = list.shared ? ", and everyone it is shared with loses it" : "";
  if (!confirm(`Delete the list “${list.name}”? Its tasks go to your trash${others}.`)) return;
  try {
    await state.api.deleteList(list.id);
    dropList(list.id);
    $('#list-nav [data-focus="list:all"]').focus();
    notice(`Deleted the list “${list.name}”; its tasks are in the trash.`);
  } catch (error) {
    listProblem(error);
  }
}

async function leaveList(list) {
  if (!confirm(`Leave “${list.name}”? Its tasks leave your view; its owner can invite you again.`)) return;
  state.leaving = list.id; // the event that follows needs no notice
  try {
    await state.api.removeMember(list.id, state.user.userId);
    dropList(list.id);
    $('#list-nav [data-focus="list:all"]').focus();
    notice(`You left “${list.name}”.`);
  } catch (error) {
    state.leaving = null;
    listProblem(error);
  }
}

/** The editor's List (those the user may change) and Assigned to (that list's members). */
async function fillListChoices(task) {
  const writable = state.lists.filter((list) => canWrite(list.id));
  $("#edit-list").replaceChildren(...writable.map((list) => el("option", { text: list.name, attrs: { value: list.id } })));
  $("#edit-list").value = task.list_id;
  return fillAssignees(task.list_id, task.assignee_id);
}

async function fillAssignees(listId, assigneeId) {
  let members;
  try {
    members = await loadMembers(listId);
  } catch (error) {
    listProblem(error);
    return false;
  }
  const option = (m) => {
    const name = m.display_name ?? m.user_id;
    const text = m.user_id === state.user.userId ? `${name} (you)` : name;
    return el("option", { text, attrs: { value: m.user_id } });
  };
  $("#edit-assignee").replaceChildren(el("option", { text: "Nobody", attrs: { value: "" } }), ...members.map(option));
  $("#edit-assignee").value = members.some((m) => m.user_id === assigneeId) ? assigneeId : "";
  return true;
}

/** `#invite=<token>` in the address (a link from the share dialog): join that list. */
async function acceptInviteFromAddress() {
  const token = new URLSearchParams(location.hash.slice(1)).get("invite");
  if (!token || !state.api) return;
  const used = () => history.replaceState(null, "", `${location.pathname}${location.search}`); // not again on reload
  try {
    const list = await state.api.acceptInvitation(token);
    used();
    state.members.delete(list.id);
    await refreshLists();
    selectList(list.id);
    notice(`You joined “${list.name}”: ${ROLE_WORDS[list.role]}.`);
  } catch (error) {
    if (!(error instanceof ApiError) || [0, 401].includes(error.status)) return showError(error); // kept: tried again after sign-in
    used();
    const why = {
      404: "That invite link does not work: it was used already, revoked, or has expired. Ask for a new one.",
      409: "That invite link is for your own list: send it to the person you want to share it with.",
    }[error.status];
    notice(why ?? describe(error), { kind: "problem", lingerMs: 0 });
  }
}

// ---------------------------------------------------------------- sharing

/** The share dialog (the owner: invite links, roles, removal) or, for a member, who shares it. */
async function openShare() {
  const list = listOf(state.listId);
  if (!list) return;
  const owner = list.role === "owner";
  let members;
  try {
    members = await loadMembers(list.id);
  } catch (error) {
    listProblem(error);
    return;
  }
  state.sharing = list.id;
  state.invitation = null;
  $("#share-title").textContent = owner ? `Share “${list.name}”` : `Members of “${list.name}”`;
  $("#share-invite").hidden = !owner;
  showInvitation(null);
  $("#share-error").hidden = true;
  $("#share-status").textContent = "";
  drawMembers(members);
  $("#share").showModal();
  (owner ? $("#invite-role") : $("#share-close")).focus();
}

function drawMembers(members) {
  const list = listOf(state.sharing);
  if (!list) return;
  const box = $("#member-list");
  const focused = box.contains(document.activeElement) ? document.activeElement.dataset.focus : null;
  box.replaceChildren(...members.map((member) => memberItem(list, member)));
  if (!focused) return;
  // The control the keyboard was on, or (its member gone) the way out.
  (box.querySelector(`[data-focus="${CSS.escape(focused)}"]`) ?? $("#share-close")).focus();
}

async function reloadMembers() {
  try {
    drawMembers(await loadMembers(state.sharing));
  } catch (error) {
    shareProblem(error);
  }
}

function memberItem(list, member) {
  const you = member.user_id === state.user.userId;
  const name = `${member.display_name ?? member.user_id}${you ? " (you)" : ""}`;
  const item = el("li", { attrs: { "data-user": member.user_id } }, [el("span", { className: "name", text: name })]);
  if (list.role === "owner" && member.role !== "owner") {
    const role = el("select", { attrs: { "aria-label": `Role of ${name}`, "data-focus": `role:${member.user_id}` } }, [
      el("option", { text: "Editor", attrs: { value: "editor" } }),
      el("option", { text: "Viewer", attrs: { value: "viewer" } }),
    ]);
    role.value = member.role;
    role.addEventListener("change", () =>
      shareChange(() => state.api.changeRole(list.id, member.user_id, role.value), `${name} is now ${role.value === "editor" ? "an editor" : "a viewer"}.`),
    );
    const remove = el("button", {
      className: "danger",
      text: "Remove",
      attrs: { type: "button", "aria-label": `Remove ${name}`, "data-focus": `remove:${member.user_id}` },
    });
    remove.addEventListener("click", () => {
      if (!confirm(`Remove ${name} from “${list.name}”? They lose it at once.`)) return;
      shareChange(() => state.api.removeMember(list.id, member.user_id), `${name} was removed.`);
    });
    item.append(role, remove);
    return item;
  }
  item.append(el("span", { className: "role", text: member.role }));
  if (you && member.role !== "owner") {
    const leave = el("button", { className: "danger", text: "Leave", attrs: { type: "button", "aria-label": "Leave this list" } });
    leave.addEventListener("click", () => leaveList(list));
    item.append(leave);
  }
  return item;
}

async function shareChange(change, done) {
  $("#share-error").hidden = true;
  try {
    await change();
    $("#share-status").textContent = done;
  } catch (error) {
    shareProblem(error);
  }
  await reloadMembers();
  refreshLists(); // the shared marker, the names of assignees
}

function shareProblem(error) {
  if (error instanceof ApiError && error.status === 401) {
    $("#share").close();
    showError(error);
    return;
  }
  $("#share-status").textContent = "";
  $("#share-error").textContent = describe(error);
  $("#share-error").hidden = false;
}

function showInvitation(url) {
  $("#invite-url").value = url ?? "";
  for (const part of ["#invite-url", "#invite-copy", "#invite-revoke"]) $(part).hidden = !url;
  $("#invite-create").textContent = url ? "Create another link" : "Create invite link";
}

async function createInvitation() {
  const listId = state.sharing;
  const role = $("#invite-role").value;
  $("#share-error").hidden = true;
  try {
    const made = await state.api.invite(listId, role);
    state.invitation = { listId, token: made.token };
    // The page itself, with the secret in the fragment: never sent to a server by the browser.
    showInvitation(`${location.origin}${location.pathname}#invite=${encodeURIComponent(made.token)}`);
    const who = role === "editor" ? "an editor" : "a viewer";
    const until = dateTime.format(new Date(made.expires_at));
    $("#share-status").textContent = `Invite link ready: it lets one person in as ${who}, until ${until}.`;
    $("#invite-url").focus();
    $("#invite-url").select();
  } catch (error) {
    shareProblem(error);
  }
}

async function revokeInvitation() {
  const { listId, token } = state.invitation;
  try {
    await state.api.revokeInvitation(listId, token);
    state.invitation = null;
    showInvitation(null);
    $("#share-status").textContent = "Link revoked: it no longer works.";
    $("#invite-create").focus();
  } catch (error) {
    shareProblem(error); // 404: it was used (or had expired) already
  }
}

/** A link in a read-only box to the clipboard; where the browser refuses, it stays selected. */
async function copyField(input, status, copied) {
  input.select();
  try {
    await navigator.clipboard.writeText(input.value);
    status.textContent = copied;
  } catch {
    status.textContent = "Selected: copy it with Ctrl+C (⌘C).";
  }
}

function startLists() {
  $("#new-list").addEventListener("click", () => toggleNewList($("#new-list-form").hidden));
  $("#new-list-form").addEventListener("submit", onNewList);
  $("#new-list-name").addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    toggleNewList(false);
    $("#new-list").focus();
  });
  $("#add-task").addEventListener("submit", onAddTask);
  $("#share-list").addEventListener("click", openShare);
  $("#rename-list").addEventListener("click", showRename);
  $("#rename-list-form").addEventListener("submit", onRenameList);
  $("#rename-list-cancel").addEventListener("click", () => hideRename(true));
  $("#rename-list-name").addEventListener("keydown", (event) => event.key === "Escape" && hideRename(true));
  $("#delete-list").addEventListener("click", deleteList);
  $("#leave-list").addEventListener("click", () => leaveList(listOf(state.listId)));
  $("#edit-list").addEventListener("change", () => fillAssignees($("#edit-list").value, $("#edit-assignee").value));
  $("#invite-create").addEventListener("click", createInvitation);
  $("#invite-copy").addEventListener("click", () =>
    copyField($("#invite-url"), $("#share-status"), "Copied: send it to the person you invite."),
  );
  $("#invite-revoke").addEventListener("click", revokeInvitation);
  $("#share-close").addEventListener("click", () => $("#share").close());
  $("#share").addEventListener("close", () => {
    state.sharing = null;
    const back = $("#share-list").hidden || $("#list-bar").hidden ? $('#list-nav [data-focus="list:all"]') : $("#share-list");
    back?.focus();
  });
  window.addEventListener("hashchange", acceptInviteFromAddress); // a link opened in this tab
}

// ---------------------------------------------------------------- live: events and notices

const NOTICES_KEPT = 5;

/** A line in the live region (read out politely); reminders stay until dismissed. */
function notice(text, { kind = "info", lingerMs = 10000 } = {}) {
  const box = $("#notices");
  const dismiss = el("button", {
    className: "icon",
    text: "✕",
    attrs: { type: "button", "aria-label": `Dismiss: ${text}`, title: "Dismiss" },
  });
  const item = el("p", { className: `notice-item ${kind}` }, [el("span", { text }), dismiss]);
  dismiss.addEventListener("click", () => item.remove());
  box.append(item);
  while (box.childElementCount > NOTICES_KEPT) box.firstElementChild.remove();
  if (lingerMs) setTimeout(() => item.remove(), lingerMs);
}

function announceNext(next) {
  const due = dueLabel(next);
  notice(`Next: task ${next.number}: ${next.title}${due ? `, due ${due}` : ""}`);
}

function showReminder(data) {
  const task = data.task;
  notice(`⏰ Reminder: ${task.title}${data.late ? " (while you were away)" : ""}`, { kind: "reminder", lingerMs: 0 });
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  try {
    // The tag makes a second tab's copy of the same reminder replace this one.
    new Notification("Reminder", { body: task.title, tag: `reminder-${task.id}` });
  } catch {
    // Some browsers only notify from a service worker: the notice on the page remains.
  }
}

let refreshTimer = null;
/** Many events in a burst (a plan and its steps) draw the lists and the tasks once. */
function refreshSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(() => {
    refreshLists(); // pending counts, roles, members
    refreshTasks({ live: true });
  }, 150);
}

function onLiveEvent(type, event) {
  if (type === "reminder.due") showReminder(event.data);
  if (type.startsWith("list.")) onListEvent(type, event.data);
  if (type.startsWith("document.")) onDocumentEvent(type, event.data);
  if (type.startsWith("task.") || type.startsWith("list.") || type === "reminder.due") refreshSoon();
}

const pause = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });

// Pauses before reconnecting: doubling, with jitter so many tabs do not return at once, up
// to a few seconds (EventSource itself retries every ~3 s): the list is never stale long.
const RECONNECT_FIRST_MS = 500;
const RECONNECT_MAX_MS = 5000;

/**
 * Follow the event stream while signed in; after a drop, reconnect with growing pauses
 * and Last-Event-ID, so what happened meanwhile is replayed, none lost.
 */
async function follow() {
  stopFollowing();
  const api = state.api;
  const live = { controller: new AbortController(), lastEventId: null };
  state.live = live;
  const { signal } = live.controller;
  let delay = RECONNECT_FIRST_MS;
  while (!signal.aborted) {
    try {
      await api.events(
        {
          lastEventId: live.lastEventId,
          signal,
          onOpen: () => {
            delay = RECONNECT_FIRST_MS;
            refreshSoon(); // whatever changed before the stream was open
          },
        },
        (type, event, id) => {
          if (id) live.lastEventId = id;
          onLiveEvent(type, event);
        },
      );
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError && error.status === 401) {
        showError(error); // signs out
        return;
      }
      if (error instanceof ApiError && error.status === 422) live.lastEventId = null; // start afresh
    }
    await pause(delay * (0.8 + Math.random() * 0.4), signal);
    delay = Math.min(delay * 2, RECONNECT_MAX_MS);
  }
}

function stopFollowing() {
  state.live?.controller.abort();
  state.live = null;
}

// ---------------------------------------------------------------- sessions

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

async function refreshSessions(more = false) {
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

// ---------------------------------------------------------------- settings

const SETTINGS_LABELS = {
  display_name: "Display name",
  timezone: "Timezone",
  instructions: "Instructions",
  model: "Model",
  confirm: "Ask before",
};

function countInstructions() {
  const used = $("#set-instructions").value.length;
  $("#instructions-count").textContent = `${used} of 2000 characters`;
}

function showNotificationState() {
  const button = $("#enable-notifications");
  const text = $("#notifications-state");
  const supported = "Notification" in window;
  const permission = supported ? Notification.permission : "unsupported";
  button.hidden = permission !== "default";
  text.textContent = {
    unsupported: "Reminders show on this page while it is open; this browser has no notifications.",
    granted: "Reminders show on this page and as browser notifications.",
    denied: "Reminders show on this page; notifications are blocked for this site in the browser's settings.",
    default: "Reminders show on this page while it is open; the browser can notify you too.",
  }[permission];
}

async function enableNotifications() {
  // Asked only here, on a click: never on load.
  await Notification.requestPermission();
  showNotificationState();
  if ($("#enable-notifications").hidden) $("#notifications-state").focus(); // the button went
}

function showCalendarUrl(url) {
  $("#calendar-url").value = url ?? "";
  $("#calendar-url").hidden = !url;
  $("#calendar-copy").hidden = !url;
  $("#calendar-create").textContent = url ? "Make a new calendar link" : "Create calendar link";
}

/** An action of a Settings button: its error in the dialog (a 401 signs out). */
async function settingsAction(action) {
  const box = $("#settings-error");
  box.hidden = true;
  try {
    await action();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      $("#settings").close();
      showError(error);
      return;
    }
    $("#settings-status").textContent = "";
    box.textContent = describe(error);
    box.hidden = false;
  }
}

async function createCalendarFeed() {
  await settingsAction(async () => {
    const feed = await state.api.createCalendarFeed();
    showCalendarUrl(feed.url);
    $("#settings-status").textContent = "Calendar link ready: add it to your calendar app as a subscription.";
    $("#calendar-url").focus();
    $("#calendar-url").select();
  });
}

async function revokeCalendarFeed() {
  await settingsAction(async () => {
    await state.api.revokeCalendarFeed();
    showCalendarUrl(null);
    $("#settings-status").textContent = "Calendar link revoked: it no longer works.";
  });
}

async function copyCalendarUrl() {
  $("#calendar-url").select();
  try {
    await navigator.clipboard.writeText($("#calendar-url").value);
    $("#settings-status").textContent = "Copied.";
  } catch {
    $("#settings-status").textContent = "Selected: copy it with Ctrl+C (⌘C).";
  }
}

async function openSettings() {
  const dialog = $("#settings");
  $("#settings-error").hidden = true;
  $("#settings-status").textContent = "";
  showDeleteAccount(false);
  showNotificationState();
  try {
    const current = await state.api.settings();
    $("#set-display-name").value = current.display_name ?? "";
    // "UTC" is the default of a user who never chose: offer the browser's zone instead.
    $("#set-timezone").value = current.timezone && current.timezone !== "UTC" ? current.timezone : timezone();
    $("#set-instructions").value = current.instructions ?? "";
    const models = current.models.includes(current.model) ? current.models : [current.model, ...current.models];
    $("#set-model").replaceChildren(...models.map((name) => el("option", { text: name, attrs: { value: name } })));
    $("#set-model").value = current.model;
    for (const choice of document.querySelectorAll('input[name="confirm"]')) choice.checked = choice.value === current.confirm;
    countInstructions();
  } catch (error) {
    showError(error);
    return;
  }
  if ("supportedValuesOf" in Intl && !$("#timezones").childElementCount) {
    $("#timezones").append(...Intl.supportedValuesOf("timeZone").map((zone) => el("option", { attrs: { value: zone } })));
  }
  dialog.showModal();
  $("#set-display-name").focus();
}

async function onSettingsSubmit(event) {
  event.preventDefault();
  const box = $("#settings-error");
  box.hidden = true;
  const text = (selector) => $(selector).value.trim() || null; // empty: back to the default
  $("#settings-save").disabled = true;
  try {
    const saved = await state.api.updateSettings({
      display_name: text("#set-display-name"),
      timezone: $("#set-timezone").value.trim(),
      instructions: text("#set-instructions"),
      model: $("#set-model").value,
      confirm: document.querySelector('input[name="confirm"]:checked')?.value,
    });
    $("#settings-status").textContent = "Saved.";
    $("#who-name").textContent = saved.display_name ?? state.user.name;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      $("#settings").close();
      showError(error);
      return;
    }
    $("#settings-status").textContent = "";
    box.textContent = inputProblem(error, SETTINGS_LABELS, "Settings");
    box.hidden = false;
  } finally {
    $("#settings-save").disabled = false;
  }
}

// ---------------------------------------------------------------- settings: your data

/** Today in the person's timezone, YYYY-MM-DD: the export's file name says when it was made. */
function localDay(date = new Date()) {
  const two = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())}`;
}

// A browser may read an object URL after click() has returned (Firefox did): revoked at once,
// the download could fail, so it is revoked a little later.
const REVOKE_AFTER_MS = 10000;

/** Save a Blob as a file: a temporary link with `download`, clicked. */
function saveFile(blob, filename) {
  const url = URL.createObjectURL(blob);
  const link = el("a", { attrs: { href: url, download: filename, hidden: "" } });
  $("#settings").append(link); // in the modal dialog: the rest of the page is inert
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), REVOKE_AFTER_MS);
}

async function downloadData() {
  const button = $("#export-data");
  button.disabled = true;
  $("#settings-status").textContent = "Preparing your data…";
  await settingsAction(async () => {
    const filename = `todo-agent-export-${state.user.userId}-${localDay()}.json`;
    saveFile(await state.api.exportAccount(), filename);
    $("#settings-status").textContent = `Downloaded: ${filename}`;
  });
  button.disabled = false;
}

/** The confirmation of "Delete my account", shown or put away (emptied either way). */
function showDeleteAccount(open) {
  $("#delete-account").hidden = !open;
  $("#delete-account-start").setAttribute("aria-expanded", String(open));
  $("#delete-account-name").value = "";
  $("#delete-account-confirm").disabled = true;
  if (!open) return;
  $("#delete-account-expected").textContent = $("#who-name").textContent; // the name the page shows
  $("#delete-account-name").focus();
}

const deleteConfirmed = () =>
  $("#delete-account-name").value.trim() === $("#delete-account-expected").textContent.trim();

async function deleteAccount() {
  if (!deleteConfirmed()) return;
  $("#delete-account-confirm").disabled = true;
  $("#settings-status").textContent = "Deleting your account…";
  // Nothing of this page may reach the service after the erasure: a request with this
  // token would start a new, empty account.
  stopFollowing();
  let deleted = false;
  await settingsAction(async () => {
    await state.api.deleteAccount();
    deleted = true;
  });
  if (deleted) {
    signOut("Your account and everything in it were deleted.");
  } else if (state.api) {
    follow(); // the account stays
    $("#delete-account-confirm").disabled = !deleteConfirmed();
  }
}

function startYourData() {
  $("#export-data").addEventListener("click", downloadData);
  $("#delete-account-start").addEventListener("click", () => showDeleteAccount($("#delete-account").hidden));
  $("#delete-account-cancel").addEventListener("click", () => {
    showDeleteAccount(false);
    $("#delete-account-start").focus();
  });
  $("#delete-account-name").addEventListener("input", () => {
    $("#delete-account-confirm").disabled = !deleteConfirmed();
  });
  $("#delete-account-name").addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault(); // not the settings' Save
    $("#delete-account-confirm").click(); // nothing while it is disabled
  });
  $("#delete-account-confirm").addEventListener("click", deleteAccount);
}

// ---------------------------------------------------------------- layout

function showView(view) {
  document.body.dataset.view = view;
  for (const button of document.querySelectorAll("[data-show]")) {
    button.setAttribute("aria-pressed", String(button.dataset.show === view));
  }
}

function start() {
  $("#name-form").addEventListener("submit", onNameSubmit);
  $("#token-form").addEventListener("submit", onTokenSubmit);
  $("#sign-out").addEventListener("click", () => signOut());
  $("#open-settings").addEventListener("click", openSettings);
  $("#settings-form").addEventListener("submit", onSettingsSubmit);
  $("#settings-cancel").addEventListener("click", () => $("#settings").close());
  $("#settings").addEventListener("close", () => $("#open-settings").focus());
  $("#enable-notifications").addEventListener("click", enableNotifications);
  $("#calendar-create").addEventListener("click", createCalendarFeed);
  $("#calendar-revoke").addEventListener("click", revokeCalendarFeed);
  $("#calendar-copy").addEventListener("click", copyCalendarUrl);
  startYourData();
  $("#editor-form").addEventListener("submit", onEditorSubmit);
  $("#editor-cancel").addEventListener("click", () => $("#task-editor").close());
  $("#task-editor").addEventListener("close", () => {
    const back = state.editing && $("#task-list").querySelector(focusKey(state.editing, "edit"));
    back?.focus();
  });
  $("#edit-repeat").addEventListener("change", showRuleBox);
  $("#edit-due").addEventListener("input", weeklyRule); // "every week on <the due day>"
  $("#set-instructions").addEventListener("input", countInstructions);
  $("#composer").addEventListener("submit", onSend);
  $("#message").addEventListener("keydown", onComposerKey);
  $("#new-chat").addEventListener("click", () => {
    newChat();
    showView("chat");
    $("#message").focus();
  });
  $("#more-sessions").addEventListener("click", () => refreshSessions(true));
  $("#task-filter").addEventListener("change", () => (refreshTasks(), refreshDocuments()));
  startDocuments();
  $("#empty-trash").addEventListener("click", emptyTrash);
  startLists();
  for (const button of document.querySelectorAll("[data-show]")) {
    button.addEventListener("click", () => showView(button.dataset.show));
  }
  showView("chat");
  const saved = JSON.parse(sessionStorage.getItem(STORAGE_KEY) ?? "null");
  if (saved) signIn(saved);
  else signOut();
}

start();
