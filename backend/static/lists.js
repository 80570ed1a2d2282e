// Lists in the sidebar, the bar above a list's tasks, invitations and members.
import { ApiError } from "./api.js";
import { refreshDocuments } from "./documents.js";
import { $, copyField, dateTime, describe, el, inputProblem, notice, showError, state } from "./page.js";
import { refreshTasks } from "./tasks.js";

// ---------------------------------------------------------------- lists

const ROLE_WORDS = {
  owner: "you own it",
  editor: "you can add and change its tasks",
  viewer: "you can view its tasks, not change them",
};

export const listOf = (id) => state.lists.find((list) => list.id === id) ?? null;

/** Whether the user may change a list's tasks: its owner or an editor (the service decides). */
export const canWrite = (listId) => ["owner", "editor"].includes(listOf(listId)?.role);

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
export function listMeta(task) {
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
export function listsSignature() {
  const members = [...state.members].sort(([a], [b]) => a.localeCompare(b));
  return JSON.stringify([state.lists.map((list) => [list.id, list.name, list.role]), members]);
}

let listsRequest = 0;
/** The sidebar from the service (Inbox first, then own and shared lists, with pending counts). */
export async function refreshLists() {
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
export function selectList(listId) {
  state.listId = listId;
  if ($("#task-filter").value === "trash") $("#task-filter").value = "all"; // the trash has no lists
  hideRename();
  drawLists();
  refreshTasks();
  refreshDocuments();
}

/** Above the tasks: the list's name, the user's role, and what they may do with it. */
export function drawListBar() {
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
export function listGone(error) {
  if (!(error instanceof ApiError) || error.status !== 404 || !state.listId) return false;
  dropList(state.listId);
  refreshLists();
  return true;
}

/** list.* events: members change (names of assignees); a lost list goes at once. */
export function onListEvent(type, data) {
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

export function forgetLists() {
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
export async function fillListChoices(task) {
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
export async function acceptInviteFromAddress() {
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

export function startLists() {
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
