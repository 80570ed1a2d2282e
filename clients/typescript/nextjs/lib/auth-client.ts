import { createAuthClient } from "better-auth/react";
import { jwtClient } from "better-auth/client/plugins";

// Better Auth with its JWT plugin: `authClient.token()` gives a short-lived JWT whose `sub`
// is the user id. todo-agent checks it against Better Auth's JWKS (JWT_JWKS_URL).
export const authClient = createAuthClient({ plugins: [jwtClient()] });
