// Signing in (a name in development, else a bearer token) and out.
import { Api, ApiError, devToken, tokenSubject } from "./api.js";
import { newChat, refreshSessions } from "./chat.js";
import { refreshDocuments } from "./documents.js";
import { acceptInviteFromAddress, forgetLists, refreshLists } from "./lists.js";
import { follow, stopFollowing } from "./live.js";
import { resendSubscription } from "./notifications.js";
import { $, describe, state } from "./page.js";
import { refreshTasks, showTaskFromAddress } from "./tasks.js";

const STORAGE_KEY = "todo-agent.session"; // sessionStorage: this tab only
export function signOut(reason = "") {
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
  resendSubscription();
  showTaskFromAddress();
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

export function startSignIn() {
  $("#name-form").addEventListener("submit", onNameSubmit);
  $("#token-form").addEventListener("submit", onTokenSubmit);
  $("#sign-out").addEventListener("click", () => signOut());
}

/** Signed in earlier in this tab (a reload): go on; else ask who is there. */
export function resume() {
  const saved = JSON.parse(sessionStorage.getItem(STORAGE_KEY) ?? "null");
  if (saved) signIn(saved);
  else signOut();
}
