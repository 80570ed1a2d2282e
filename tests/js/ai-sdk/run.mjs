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
// stdout: {version: {name: result}}, each send a {status, chunks, message, errors} where
// `chunks` passed the package's own chunk schema (DefaultChatTransport validates them; the
// transport is docs/nextjs.md's, so it sends only the newest message, as that guide says) and
// `message` is what readUIMessageStream assembled from them.
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

// Every response's status, for the requests the transport makes with the global fetch.
const statuses = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async (url, init) => {
  const response = await realFetch(url, init);
  statuses.push(response.status);
  return response;
};

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
      const sessionId = earlier.message.metadata.session_id;
      const response = await fetch(
        `${input.baseUrl}/api/${user}/sessions/${sessionId}/messages?format=ui`,
        { headers: { Authorization: `Bearer ${input.tokens[user]}` } },
      );
      if (response.status !== 200) return { status: response.status };
      const messages = await response.json();
      // A stored answer taken up by readUIMessageStream as the message a stream continues.
      const last = messages[messages.length - 1];
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
      const validated = ai.validateUIMessages
        ? await ai.validateUIMessages({ messages }).then(() => true, (e) => String(e))
        : "not in this version";
      return { status: 200, messages, reloaded, validated };
    }
    case "resume": {
      const transport = transportFor(sdk.chatTransport, input, own(op.user));
      statuses.length = 0;
      const stream = await transport.reconnectToStream({ chatId: own(op.chatId) });
      return { status: statuses[0], stream: stream === null ? null : "a stream" };
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
