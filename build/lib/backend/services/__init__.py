"""The behaviour: tasks, users, sessions, the agent loop, its tools and the stub responder."""
