"""Documents in lists: read (`reading`), cut into sections and passages (`sections`),
kept (`store`), and found by words (`search`)."""
