// What the assistant remembers about the person (Settings): each memory to read, change or
// delete, and "Forget everything". A memory is the person's own words, shown as text.
import { ApiError } from "./api.js";
import { $, dateTime, el, itemsOf, state } from "./page.js";
import { settingsAction, settingsStatus } from "./settings.js";

/** The memories from the service, newest first; the part stays hidden where there are none to have. */
export async function loadMemories() {
  let page;
  try {
    page = await state.api.memories();
  } catch (error) {
    $("#memories").hidden = true; // a service without memories (404), or not now
    if (error instanceof ApiError && error.status === 401) throw error;
    return;
  }
  $("#memories").hidden = false;
  drawMemories(itemsOf(page));
}

function drawMemories(memories) {
  const box = $("#memory-list");
  const focused = box.contains(document.activeElement) ? document.activeElement.dataset.focus : null;
  box.replaceChildren(...memories.map(memoryItem));
  if (!memories.length) box.append(el("li", { className: "empty", text: "Nothing yet. Tell the assistant “remember that …”." }));
  $("#memories-forget").disabled = !memories.length;
  if (focused) (box.querySelector(`[data-focus="${CSS.escape(focused)}"]`) ?? $("#memories-forget")).focus();
}

function memoryItem(memory) {
  const when = dateTime.format(new Date(memory.updated_at ?? memory.created_at));
  const text = el("span", { className: "text", text: memory.text });
  const meta = el("span", { className: "hint", text: memory.created_by === "user" ? `Added ${when}` : `Remembered ${when}` });
  const edit = el("button", {
    className: "icon",
    text: "✎",
    attrs: { type: "button", "aria-label": `Edit memory: ${memory.text}`, title: "Edit", "data-focus": `${memory.id}:edit` },
  });
  const remove = el("button", {
    className: "icon delete",
    text: "✕",
    attrs: { type: "button", "aria-label": `Delete memory: ${memory.text}`, title: "Delete", "data-focus": `${memory.id}:delete` },
  });
  const item = el("li", { attrs: { "data-id": memory.id } }, [el("div", { className: "body" }, [text, meta]), edit, remove]);
  edit.addEventListener("click", () => editMemory(item, memory));
  remove.addEventListener("click", () =>
    settingsAction(async () => {
      await state.api.deleteMemory(memory.id);
      settingsStatus(`Forgot “${memory.text}”.`);
      await loadMemories();
    }),
  );
  return item;
}

/** The memory in a box to change it: Enter saves, Escape puts it back as it was. */
function editMemory(item, memory) {
  const input = el("input", { attrs: { "aria-label": "Memory", maxlength: "500", "data-focus": `${memory.id}:text` } });
  input.value = memory.text;
  const save = el("button", { text: "Save", attrs: { type: "button" } });
  const cancel = el("button", { text: "Cancel", attrs: { type: "button" } });
  const back = async () => {
    await loadMemories();
    $(`#memory-list [data-focus="${CSS.escape(`${memory.id}:edit`)}"]`)?.focus(); // the keyboard's place
  };
  save.addEventListener("click", () =>
    settingsAction(async () => {
      const text = input.value.trim();
      if (!text) return;
      await state.api.updateMemory(memory.id, text);
      settingsStatus("Memory saved.");
      await back();
    }),
  );
  cancel.addEventListener("click", back);
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault(); // not the settings' Save
      save.click();
    } else if (event.key === "Escape") {
      event.preventDefault(); // not the dialog's close
      back();
    }
  });
  item.replaceChildren(el("div", { className: "row" }, [input, save, cancel]));
  input.focus();
  input.select();
}

async function forgetEverything() {
  if (!confirm("Forget everything the assistant remembers about you? It cannot be undone.")) return;
  await settingsAction(async () => {
    await state.api.forgetMemories();
    settingsStatus("The assistant remembers nothing about you now.");
    await loadMemories();
  });
}

/** memory.* events (a chat here or elsewhere, another tab): the list follows while it is open. */
export function onMemoryEvent() {
  if ($("#settings").open && !$("#memories").hidden && !$("#memory-list").querySelector("input")) loadMemories();
}

export function startMemories() {
  $("#memories-forget").addEventListener("click", forgetEverything);
}
