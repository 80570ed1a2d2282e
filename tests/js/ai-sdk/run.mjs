// The Vercel AI SDK's own client against a running todo-agent, for each `ai` version asked.
//
// stdin: {"baseUrl", "versions": ["ai5", "ai6"], "tokens": {user: jwt}, "ops": [op, ...],
//         "transportModule": the chat-transport.ts of docs/nextjs.md,
//         "typescript": a path to compile it}
// Each op runs in order, per version, with users and chat ids suffixed by the version so
// the runs do not share state. An op is one of
//   {"op": "send", "name", "user", "chatId", "text", "pathUser"?, "after"?}  a new user
//       message (after op `after`'s conversation, handed to the transport as useChat does)
//   {"op": "regenerate", "name", "of", "chatId"?}  answer op `of`'s user message again
//   {"op": "history", "name", "of", "user"?}  GET op `of`'s session ?format=ui
//   {"op": "resume", "name", "user", "chatId"} useChat({resume: true})'s request
//   {"op": "resumeElsewhere", "name", "user", "chatId", "text", "resumeUrl"}  send `text`,
//       and once its answer's text has begun, make that request (a reload) to the server at
//       `resumeUrl` (another replica): {posted, resumed, resumeStatus}
//   {"op": "approval", "name", "user", "chatId", "text", "approved", "reason"?}  (ai 6) the
//       Chat class that useChat wraps, opted in to approval cards (`body: {approvals:
//       "ai-sdk"}`) and sending by itself once every card is answered
//       (lastAssistantMessageIsCompleteWithApprovalResponses): sends `text`, answers the
//       card with addToolApprovalResponse, and reads the history before and after
// stdout: {version: {name: result}}, each send a {status, chunks, message, errors} where
// `chunks` passed the package's own chunk schema (DefaultChatTransport validates them; the
// transport is docs/nextjs.md's, so it sends only the newest message, as that guide says) and
// `message` is what readUIMessageStream assembled from them; an approval a {asked, messages,
// status, error, exchanges: [{body, chunks}], waiting, history} (the histories with
// `validated`: what ai 6's validateUIMessages said of them).
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import * as ai5 from "ai5";
import * as ai6 from "ai6";

const SDKS = { ai5, ai6 };

async function readStdin() {
  let text = "";
  for await (const piece of process.stdin) text += piece;
  return JSON.parse(text);
}

// The transport docs/nextjs.md shows (clients/typescript/nextjs/lib/chat-transport.ts),
// compiled with the typed client's TypeScript, its `ai` import bound to the version under test.
async function docsTransport(input, version) {
  const require = createRequire(input.typescript);
  const ts = require("typescript");
  const source = await readFile(input.transportModule, "utf8");
  const { outputText } = ts.transpileModule(source, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  const compiled = outputText.replace(/from "ai"/g, `from "${version}"`);
  if (compiled === outputText) throw new Error("chat-transport.ts no longer imports from ai");
  const dir = new URL("./node_modules/.readme/", import.meta.url);
  await mkdir(dir, { recursive: true });
  const file = new URL(`chat-transport-${version}.mjs`, dir);
  await writeFile(file, compiled);
  return (await import(file.href)).chatTransport;
}

// Every response's status, for the requests the transport makes with the global fetch; and,
// while `exchanges` is an array, each request's body and the chunks of its response.
const statuses = [];
let exchanges = null;
const realFetch = globalThis.fetch;
globalThis.fetch = async (url, init) => {
  const response = await realFetch(url, init);
  statuses.push(response.status);
  if (exchanges !== null && init?.method === "POST") {
    const body = JSON.parse(init.body);
    const { status } = response;
    const text = response.clone().text();
    exchanges.push(text.then((sse) => ({ body, status, chunks: sseChunks(sse) })));
  }
  return response;
};

function sseChunks(text) {
  return text
    .split("\n\n")
    .filter((frame) => frame.startsWith("data: ") && frame !== "data: [DONE]")
    .map((frame) => JSON.parse(frame.slice("data: ".length)));
}

function transportFor(chatTransport, input, user, pathUser = user) {
  const token = async () => input.tokens[user] ?? "not-a-jwt";
  return chatTransport(input.baseUrl, pathUser, token);
}

async function assemble(ai, stream) {
  const [forReader, forRecord] = stream.tee();
  const chunks = [];
  const recorded = (async () => {
    const reader = forRecord.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      chunks.push(value);
    }
  })().catch((error) => chunks.push({ recordError: String(error) }));
  const errors = [];
  let message = null;
  try {
    for await (const update of ai.readUIMessageStream({
      stream: forReader,
      terminateOnError: true,
      onError: (error) => errors.push(String(error?.message ?? error)),
    })) {
      message = update;
    }
  } catch (error) {
    errors.push(String(error?.message ?? error));
  }
  await recorded;
  return { chunks, message, errors };
}

async function send(sdk, input, { user, chatId, messages, trigger, messageId, pathUser }) {
  const transport = transportFor(sdk.chatTransport, input, user, pathUser);
  statuses.length = 0;
  try {
    const stream = await transport.sendMessages({
      chatId,
      messages,
      trigger,
      messageId,
      abortSignal: undefined,
    });
    return { status: statuses[0], ...(await assemble(sdk.ai, stream)) };
  } catch (error) {
    return { status: statuses[0], thrown: String(error?.message ?? error) };
  }
}

// useChat's Chat without React: ai's AbstractChat (where the protocol lives) over a plain
// state, as @ai-sdk/react's ReactChatState keeps it (a message is snapshotted part by part).
class ChatState {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage = (message) => {
    this.messages = this.messages.concat(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [
      ...this.messages.slice(0, index),
      this.snapshot(message),
      ...this.messages.slice(index + 1),
    ];
  };
  snapshot = (value) =>
    value != null && typeof value === "object" && Array.isArray(value.parts)
      ? { ...value, parts: value.parts.map((part) => ({ ...part })) }
      : value;
}

// A plain copy of the messages as the app would render or store them.
const plain = (value) => JSON.parse(JSON.stringify(value));

async function uiHistory(ai, input, user, sessionId) {
  const response = await fetch(
    `${input.baseUrl}/api/${user}/sessions/${sessionId}/messages?format=ui`,
    { headers: { Authorization: `Bearer ${input.tokens[user]}` } },
  );
  if (response.status !== 200) return { status: response.status };
  const messages = await response.json();
  const validated = ai.validateUIMessages
    ? await ai.validateUIMessages({ messages }).then(() => true, (e) => String(e))
    : "not in this version";
  return { status: 200, messages, validated };
}

async function approval(ai, input, op, user, chatId) {
  let finished = () => {};
  const chat = new (class extends ai.AbstractChat {
    constructor(init) {
      super({ ...init, state: new ChatState() });
    }
  })({
    id: chatId,
    transport: new ai.DefaultChatTransport({
      api: `${input.baseUrl}/api/${user}/chat/ui`,
      headers: { Authorization: `Bearer ${input.tokens[user]}` },
      body: { approvals: "ai-sdk", timezone: "Europe/Berlin" },
    }),
    sendAutomaticallyWhen: ai.lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: (outcome) => finished(outcome),
  });
  // The outcome of the Chat's next request (onFinish), or after 15 s that none came.
  const nextFinish = () => {
    const done = new Promise((resolve) => (finished = resolve));
    const late = new Promise((resolve) => {
      setTimeout(resolve, 15000, "no request finished").unref();
    });
    return Promise.race([done, late]);
  };
  exchanges = [];
  const first = nextFinish();
  await chat.sendMessage({ text: op.text });
  await first;
  const asked = plain(chat.messages);
  const card = asked
    .at(-1)
    .parts.find((part) => ai.isToolUIPart(part) && part.state === "approval-requested");
  const sessionId = asked.at(-1).metadata?.session_id;
  const waiting = await uiHistory(ai, input, user, sessionId);
  let answered = "no card to answer";
  if (card) {
    const second = nextFinish();
    await chat.addToolApprovalResponse({
      id: card.approval.id,
      approved: op.approved,
      ...(op.reason === undefined ? {} : { reason: op.reason }),
    });
    const outcome = await second;
    if (typeof outcome === "string") answered = outcome;
    else answered = outcome.isError ? `error: ${chat.error}` : "finished";
  }
  const recorded = await Promise.all(exchanges);
  exchanges = null;
  return {
    asked,
    answered,
    messages: plain(chat.messages),
    status: chat.status,
    error: chat.error === undefined ? null : String(chat.error),
    exchanges: recorded,
    waiting,
    history: await uiHistory(ai, input, user, sessionId),
  };
}

function userMessage(text) {
  const id = `u-${Math.random().toString(36).slice(2)}`;
  return { id, role: "user", parts: [{ type: "text", text }] };
}

function conversation(earlier) {
  return [...(earlier.history ?? []), earlier.sent, earlier.message];
}

async function runOp(sdk, input, op, version, done) {
  const ai = sdk.ai;
  const own = (name) => `${name}-${version}`;
  switch (op.op) {
    case "send": {
      const sent = userMessage(op.text);
      const chatId = op.chatId === undefined ? undefined : own(op.chatId);
      const result = await send(sdk, input, {
        user: own(op.user),
        pathUser: op.pathUser === undefined ? undefined : own(op.pathUser),
        chatId,
        // As useChat does: the whole conversation so far, then the new message.
        messages: [...(op.after ? conversation(done[op.after]) : []), sent],
        trigger: "submit-message",
      });
      const history = op.after ? conversation(done[op.after]) : [];
      return { ...result, sent, history, chatId, user: own(op.user) };
    }
    case "regenerate": {
      const earlier = done[op.of];
      // As useChat's regenerate(): the answer is dropped, the rest is sent again.
      return send(sdk, input, {
        user: earlier.user,
        chatId: op.chatId === undefined ? earlier.chatId : own(op.chatId),
        messages: [earlier.sent],
        trigger: "regenerate-message",
        messageId: earlier.message.id,
      });
    }
    case "history": {
      const earlier = done[op.of];
      const user = op.user === undefined ? earlier.user : own(op.user);
      const history = await uiHistory(ai, input, user, earlier.message.metadata.session_id);
      if (history.status !== 200) return history;
      // A stored answer taken up by readUIMessageStream as the message a stream continues.
      const last = history.messages[history.messages.length - 1];
      let reloaded = null;
      for await (const update of ai.readUIMessageStream({
        message: last,
        stream: new ReadableStream({
          start(controller) {
            controller.enqueue({ type: "start" });
            controller.enqueue({ type: "finish", messageMetadata: {} });
            controller.close();
          },
        }),
      })) {
        reloaded = update;
      }
      return { ...history, reloaded };
    }
    case "approval":
      return approval(ai, input, op, own(op.user), own(op.chatId));
    case "resume": {
      const transport = transportFor(sdk.chatTransport, input, own(op.user));
      statuses.length = 0;
      const stream = await transport.reconnectToStream({ chatId: own(op.chatId) });
      return { status: statuses[0], stream: stream === null ? null : "a stream" };
    }
    case "resumeElsewhere": {
      const [user, chatId] = [own(op.user), own(op.chatId)];
      statuses.length = 0;
      const stream = await transportFor(sdk.chatTransport, input, user).sendMessages({
        chatId,
        messages: [userMessage(op.text)],
        trigger: "submit-message",
        messageId: undefined,
        abortSignal: undefined,
      });
      const [watched, posting] = stream.tee();
      const reader = watched.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done || value.type === "text-delta") break;
      }
      reader.cancel();
      const posted = assemble(ai, posting);
      statuses.length = 0;
      const elsewhere = transportFor(sdk.chatTransport, { ...input, baseUrl: op.resumeUrl }, user);
      const again = await elsewhere.reconnectToStream({ chatId });
      const resumeStatus = statuses[0];
      const resumed = again === null ? null : await assemble(ai, again);
      return { posted: await posted, resumed, resumeStatus };
    }
    default:
      throw new Error(`unknown op ${op.op}`);
  }
}

const input = await readStdin();
const output = {};
for (const version of input.versions) {
  const done = {};
  const sdk = { ai: SDKS[version], chatTransport: await docsTransport(input, version) };
  for (const op of input.ops) {
    done[op.name] = await runOp(sdk, input, op, version, done);
  }
  output[version] = done;
}
process.stdout.write(JSON.stringify(output));
