// A webhook receiver for the webhook tests: verifies every delivery with the
// standardwebhooks npm package, the way a TypeScript consumer of our webhooks would.
// Arguments: PORT (0 picks a free one) and the signing secret (whsec_...). Prints one line
// {"ready": true, "port": N}, then one JSON line per delivery:
// {"id": webhook-id, "verified": true, "payload": the verified JSON} answered 204, or
// {"id": webhook-id, "verified": false, "error": "..."} answered 400.
// It runs until its stdin closes, so it never outlives the test that started it.
import { createServer } from "node:http";
import { Webhook } from "standardwebhooks";

const [port = "0", secret] = process.argv.slice(2);
const webhook = new Webhook(secret);

function report(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const id = req.headers["webhook-id"] ?? null;
    try {
      const payload = webhook.verify(body, req.headers);
      report({ id, verified: true, payload });
      res.writeHead(204).end();
    } catch (error) {
      report({ id, verified: false, error: String(error?.message ?? error) });
      res.writeHead(400).end();
    }
  });
});

process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
server.listen(Number(port), "127.0.0.1", () => report({ ready: true, port: server.address().port }));
