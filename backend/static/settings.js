// The Settings dialog: the person's settings, the calendar feed, and their data; where
// reminders go (notifications.js), apps (apps.js) and memories (memories.js) are parts of it.
import { ApiError } from "./api.js";
import { follow, stopFollowing } from "./live.js";
import { loadAppPasswords } from "./apps.js";
import { loadMemories } from "./memories.js";
import { loadNotificationSettings, NOTIFY_LABELS, saveNotificationSettings, showNotificationState } from "./notifications.js";
import { $, describe, el, inputProblem, showError, state, timezone } from "./page.js";
import { signOut } from "./signin.js";

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

function showCalendarUrl(url) {
  $("#calendar-url").value = url ?? "";
  $("#calendar-url").hidden = !url;
  $("#calendar-copy").hidden = !url;
  $("#calendar-create").textContent = url ? "Make a new calendar link" : "Create calendar link";
}

/** What a button of the Settings did, read out politely. */
export function settingsStatus(text) {
  $("#settings-status").textContent = text;
}

/**
 * An action of a Settings button: its error in the dialog (a 401 signs out); with `labels`,
 * a 422 names the fields it is about.
 */
export async function settingsAction(action, labels = null) {
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
    box.textContent = labels ? inputProblem(error, labels, "Settings") : describe(error);
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
    // The parts whose API the service lacks (404) stay hidden.
    const [current] = await Promise.all([state.api.settings(), loadNotificationSettings(), loadAppPasswords(), loadMemories()]);
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
    $("#who-name").textContent = saved.display_name ?? state.user.name;
    await saveNotificationSettings();
    $("#settings-status").textContent = "Saved.";
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      $("#settings").close();
      showError(error);
      return;
    }
    $("#settings-status").textContent = "";
    box.textContent = inputProblem(error, { ...SETTINGS_LABELS, ...NOTIFY_LABELS }, "Settings");
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

export function startSettings() {
  $("#open-settings").addEventListener("click", openSettings);
  $("#settings-form").addEventListener("submit", onSettingsSubmit);
  $("#settings-cancel").addEventListener("click", () => $("#settings").close());
  $("#settings").addEventListener("close", () => $("#open-settings").focus());
  $("#set-instructions").addEventListener("input", countInstructions);
  $("#calendar-create").addEventListener("click", createCalendarFeed);
  $("#calendar-revoke").addEventListener("click", revokeCalendarFeed);
  $("#calendar-copy").addEventListener("click", copyCalendarUrl);
  startYourData();
}
