// The task list (steps, the trash) and the task editor (repeat, reminder, list, assignee).
import { ApiError } from "./api.js";
import { canWrite, drawListBar, fillListChoices, listGone, listMeta, listsSignature, selectList } from "./lists.js";
import { refreshDocuments } from "./documents.js";
import { $, dateOnly, dateTime, el, inputProblem, notice, showError, showView, state } from "./page.js";

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
  if (task.priority !== "none") meta.append(el("span", { className: `badge priority ${task.priority}`, text: task.priority }));
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
export async function refreshTasks({ live = false } = {}) {
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

function announceNext(next) {
  const due = dueLabel(next);
  notice(`Next: task ${next.number}: ${next.title}${due ? `, due ${due}` : ""}`);
}

/**
 * `#task=<id>` in the address (a notification's link, or its click while the page is open):
 * that task, among all tasks, in view and focused.
 */
export async function showTaskFromAddress() {
  const id = new URLSearchParams(location.hash.slice(1)).get("task");
  if (!id || !state.api) return;
  history.replaceState(null, "", `${location.pathname}${location.search}`); // not again on reload
  await state.listsReady;
  $("#task-filter").value = "all";
  selectList(null);
  await refreshTasks();
  const check = $("#task-list").querySelector(`[data-focus="${CSS.escape(`${id}:check`)}"]`);
  if (!check) return;
  showView("tasks"); // on a phone, the tasks' tab
  check.scrollIntoView({ block: "center" });
  check.focus();
}

export function startTasks() {
  $("#editor-form").addEventListener("submit", onEditorSubmit);
  $("#editor-cancel").addEventListener("click", () => $("#task-editor").close());
  $("#task-editor").addEventListener("close", () => {
    const back = state.editing && $("#task-list").querySelector(focusKey(state.editing, "edit"));
    back?.focus();
  });
  $("#edit-repeat").addEventListener("change", showRuleBox);
  $("#edit-due").addEventListener("input", weeklyRule); // "every week on <the due day>"
  $("#task-filter").addEventListener("change", () => (refreshTasks(), refreshDocuments()));
  $("#empty-trash").addEventListener("click", emptyTrash);
  window.addEventListener("hashchange", showTaskFromAddress);
}
