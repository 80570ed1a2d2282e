// Real Better Auth instances for the identity tests: email/password sign-up and the jwt()
// plugin, everything in memory (no `database` option). Takes one argument, a JSON object
// {"name": {"port", "alg", "expirationTime", "rotationInterval", "gracePeriod", "issuer",
// "audience", "todoAgentUrl"}, ...} (every field optional; port 0 or none picks a free one),
// serves each instance on its own loopback port and prints one line:
// {"ready": true, "instances": {"name": "http://127.0.0.1:PORT"}}.
// It runs until its stdin closes, so it never outlives the test that started it.
import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { betterAuth } from "better-auth";
import { toNodeHandler } from "better-auth/node";
import { jwt } from "better-auth/plugins/jwt";

const KEY_PAIRS = {
  EdDSA: { alg: "EdDSA", crv: "Ed25519" },
  RS256: { alg: "RS256", modulusLength: 2048 },
  ES256: { alg: "ES256", crv: "P-256" },
};

function listen(server, port) {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve(server.address().port));
  });
}

// With `todoAgentUrl`, deleting a user (POST /api/auth/delete-user) erases them in
// todo-agent first, as docs/data.md shows: DELETE /api/{id} with a token for them signed by
// the jwt() plugin; anything but 204 stops Better Auth's own deletion.
function deleteUser(todoAgentUrl, signFor) {
  if (!todoAgentUrl) return undefined;
  return {
    enabled: true,
    beforeDelete: async (user) => {
      const token = await signFor(user.id);
      const response = await fetch(`${todoAgentUrl}/api/${encodeURIComponent(user.id)}`, {
        method: "DELETE",
        headers: { Authorization: `Bearer ${token}` },
      });
      if (response.status !== 204) {
        throw new Error(`todo-agent did not erase ${user.id}: ${response.status}`);
      }
    },
  };
}

async function serve(config) {
  // The base URL carries the port, so listen first and build the instance after.
  let handler = null;
  const server = createServer((req, res) => handler(req, res));
  const baseURL = `http://127.0.0.1:${await listen(server, config.port ?? 0)}`;
  const signFor = async (userId) =>
    (await auth.api.signJWT({ body: { payload: { sub: userId } } })).token;
  const auth = betterAuth({
    baseURL,
    secret: randomBytes(32).toString("hex"),
    emailAndPassword: { enabled: true },
    telemetry: { enabled: false },
    // The tests sign up and ask for tokens faster than a person would.
    rateLimit: { enabled: false },
    logger: { level: "error" },
    user: { deleteUser: deleteUser(config.todoAgentUrl, signFor) },
    plugins: [
      jwt({
        jwks: {
          keyPairConfig: KEY_PAIRS[config.alg ?? "EdDSA"],
          rotationInterval: config.rotationInterval,
          gracePeriod: config.gracePeriod,
        },
        jwt: {
          expirationTime: config.expirationTime,
          issuer: config.issuer,
          audience: config.audience,
        },
      }),
    ],
  });
  handler = toNodeHandler(auth);
  return { baseURL };
}

process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
const instances = {};
for (const [name, config] of Object.entries(JSON.parse(process.argv[2] ?? "{}"))) {
  instances[name] = (await serve(config)).baseURL;
}
process.stdout.write(`${JSON.stringify({ ready: true, instances })}\n`);
