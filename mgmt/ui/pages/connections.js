// The connections pages: not built yet (issue 15). A page module exports its
// routes; with none, the top bar has no link to it.

export const routes = [];
