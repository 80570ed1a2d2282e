// Documents: the list under the tasks, uploads (chosen or dropped), the viewer.
import { ApiError } from "./api.js";
import { canWrite, listGone, listOf } from "./lists.js";
import { $, describe, el, notice, showError, state } from "./page.js";

const KIB = 1024;
const documentSize = (bytes) =>
  bytes < KIB ? `${bytes} B` : bytes < KIB * KIB ? `${Math.round(bytes / KIB)} KB` : `${(bytes / KIB / KIB).toFixed(1)} MB`;

/** Where a document added now goes: the list on show if the user may add to it, else the Inbox. */
const documentTarget = () => (state.listId && canWrite(state.listId) ? state.listId : null);

let documentsRequest = 0;
/** The documents of the list on show (all the user reads when no list is chosen). */
export async function refreshDocuments() {
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
export async function openDocument(id) {
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
export function onDocumentEvent(type, data) {
  if (type === "document.deleted" && state.viewing?.id === data.document_id && $("#document-viewer").open) {
    $("#document-viewer").close();
    notice(`“${data.title}” was deleted.`);
  }
  refreshDocuments();
}

const carriesFiles = (event) => [...(event.dataTransfer?.types ?? [])].includes("Files");

export function startDocuments() {
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
