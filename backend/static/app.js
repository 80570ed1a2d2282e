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
    case 403:
      return "This token belongs to another user.";
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
  refreshTasks();
  refreshSessions();
  follow();
  $("#message").focus();
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
  const check = el("input", {
    attrs: {
      type: "checkbox",
      "aria-label": `${task.completed ? "Reopen" : "Complete"} ${kind} ${task.number}: ${task.title}`,
      "data-focus": `${task.id}:check`,
    },
  });
  check.checked = task.completed;
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
  const title = el("span", { className: "title", text: task.title });
  const number = el("span", { className: "number", text: `${task.number}` });
  const body = el("div", { className: "body" }, [el("div", {}, [number, title]), meta]);
  const row = el("div", { className: "row" }, [check, body]);
  if (!step) row.append(expander(task), editButton(task));
  row.append(remove);
  const item = el("li", { className: step ? "task step" : "task", attrs: { "data-id": task.id } }, [row]);
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
  if (!item.isConnected) return;
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
async function refreshTasks() {
  if (!state.api) return;
  const ticket = ++tasksRequest; // only the latest answer is drawn
  const filter = $("#task-filter").value;
  const trash = filter === "trash";
  $("#trash-head").hidden = !trash;
  $("#tasks-name").textContent = trash ? "Trash" : "Tasks";
  try {
    const page = trash ? await state.api.trash() : await state.api.tasks(filter);
    if (ticket !== tasksRequest) return;
    const list = $("#task-list");
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

function openEditor(task) {
  state.editing = task;
  $("#editor-error").hidden = true;
  $("#editor-title").textContent = `Edit task ${task.number}`;
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

const TASK_LABELS = { title: "Title", due_at: "Due", recurrence: "Repeat", remind_at: "Reminder" };

async function onEditorSubmit(event) {
  event.preventDefault();
  const task = state.editing;
  const box = $("#editor-error");
  box.hidden = true;
  // Only what changed is sent: an unchanged rule or reminder is left exactly as it was.
  const changes = {};
  const title = $("#edit-title").value.trim();
  if (title !== task.title) changes.title = title;
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
/** Many events in a burst (a plan and its steps) draw the list once. */
function refreshSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(refreshTasks, 150);
}

function onLiveEvent(type, event) {
  if (type === "reminder.due") showReminder(event.data);
  if (type.startsWith("task.") || type === "reminder.due") refreshSoon();
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

async function calendarAction(action) {
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
  await calendarAction(async () => {
    const feed = await state.api.createCalendarFeed();
    showCalendarUrl(feed.url);
    $("#settings-status").textContent = "Calendar link ready: add it to your calendar app as a subscription.";
    $("#calendar-url").focus();
    $("#calendar-url").select();
  });
}

async function revokeCalendarFeed() {
  await calendarAction(async () => {
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
  $("#task-filter").addEventListener("change", refreshTasks);
  $("#empty-trash").addEventListener("click", emptyTrash);
  for (const button of document.querySelectorAll("[data-show]")) {
    button.addEventListener("click", () => showView(button.dataset.show));
  }
  showView("chat");
  const saved = JSON.parse(sessionStorage.getItem(STORAGE_KEY) ?? "null");
  if (saved) signIn(saved);
  else signOut();
}

start();
