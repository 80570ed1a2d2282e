"""Memories: short facts a person told the assistant, the person's own to see and change.

- `store`: the rows (REST, the tools, export and import, undo of the turn that saved one);
- `prompt`: how every model call carries them, quoted as data after the static rules;
- `guard`: whether the person's own message asked for something to be remembered (a
  `remember` call it did not ask for waits for their yes, as a delete does).
"""
