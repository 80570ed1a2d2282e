import { betterAuth } from "better-auth";
import { jwt } from "better-auth/plugins";

const TODO_AGENT_URL = process.env.TODO_AGENT_URL ?? "http://127.0.0.1:8000";

/** Erase the user in todo-agent, with a token for them that the jwt() plugin signs. */
async function eraseInTodoAgent(userId: string): Promise<void> {
  const { token } = await auth.api.signJWT({ body: { payload: { sub: userId } } });
  const response = await fetch(`${TODO_AGENT_URL}/api/${encodeURIComponent(userId)}`, {
    method: "DELETE",
    headers: { Authorization: `Bearer ${token}` },
  });
  if (response.status !== 204) {
    throw new Error(`todo-agent did not erase ${userId}: ${response.status}`);
  }
}

export const auth = betterAuth({
  // ... database, emailAndPassword, etc.
  user: {
    deleteUser: {
      enabled: true,
      beforeDelete: async (user) => eraseInTodoAgent(user.id),
    },
  },
  plugins: [jwt()],
});
