// Apps on the person's phone and computer (Settings): CalDAV app passwords, one per device,
// made here and shown once with what to type into the app; listed with their last use;
// revoked at once.
import { ApiError } from "./api.js";
import { $, copyField, dateTime, el, itemsOf, state } from "./page.js";
import { settingsAction, settingsStatus } from "./settings.js";

/** What a CalDAV app asks for: the server's address (its DAV root). */
const davUrl = () => `${location.origin}/dav/`;

/** The person's app passwords; the part stays hidden where the service has no CalDAV. */
export async function loadAppPasswords() {
  let page;
  try {
    page = await state.api.appPasswords();
  } catch (error) {
    $("#apps").hidden = true; // a service without CalDAV (404), or not now
    if (error instanceof ApiError && error.status === 401) throw error;
    return;
  }
  $("#apps").hidden = false;
  drawAppPasswords(itemsOf(page));
}

function drawAppPasswords(passwords) {
  const box = $("#app-password-list");
  box.replaceChildren(...passwords.map(appPasswordItem));
  if (!passwords.length) box.append(el("li", { className: "empty", text: "No app passwords yet." }));
}

function appPasswordItem(made) {
  const used = made.last_used_at ? `last used ${dateTime.format(new Date(made.last_used_at))}` : "never used";
  const access = made.read_only ? "read only" : made.read_only === false ? "can change tasks" : null;
  const facts = [access, `made ${dateTime.format(new Date(made.created_at))}`, used].filter(Boolean);
  const revoke = el("button", {
    className: "danger",
    text: "Revoke",
    attrs: { type: "button", "aria-label": `Revoke the app password ${made.name}` },
  });
  revoke.addEventListener("click", () => {
    if (!confirm(`Revoke the app password “${made.name}”? The app using it stops syncing at once.`)) return;
    settingsAction(async () => {
      await state.api.revokeAppPassword(made.id);
      showMade(null);
      settingsStatus(`Revoked “${made.name}”: it no longer works.`);
      await loadAppPasswords();
      $("#app-password-name").focus(); // the button went
    });
  });
  return el("li", { attrs: { "data-id": made.id } }, [
    el("div", { className: "body" }, [el("span", { className: "name", text: made.name }), el("span", { className: "hint", text: facts.join(" · ") })]),
    revoke,
  ]);
}

/** The new password with the server and username to type into the app (null: put away). */
function showMade(made) {
  $("#app-password-made").hidden = !made;
  $("#app-password-url").value = made ? davUrl() : "";
  $("#app-password-username").value = made?.username ?? "";
  $("#app-password-password").value = made?.password ?? ""; // in the page only while shown
}

async function createAppPassword() {
  const name = $("#app-password-name").value.trim();
  if (!name) {
    $("#app-password-name").focus();
    return;
  }
  await settingsAction(async () => {
    const made = await state.api.createAppPassword({ name, readOnly: $("#app-password-read-only").checked });
    $("#app-password-name").value = "";
    $("#app-password-read-only").checked = false;
    showMade(made);
    settingsStatus(`App password for “${made.name}” ready: type it into the app now, it is not shown again.`);
    await loadAppPasswords();
    $("#app-password-password").focus();
    $("#app-password-password").select();
  });
}

export function startApps() {
  $("#app-password-create").addEventListener("click", createAppPassword);
  $("#app-password-name").addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault(); // not the settings' Save
    createAppPassword();
  });
  for (const part of ["url", "username", "password"]) {
    $(`#app-password-copy-${part}`).addEventListener("click", () =>
      copyField($(`#app-password-${part}`), $("#settings-status"), "Copied."),
    );
  }
  $("#settings").addEventListener("close", () => showMade(null)); // shown once: not on reopening
}
