// The chat page's entry: each part wires its own controls, then the tab signs in again
// (or asks who is there). Plain ES modules, no build step.
import { startApps } from "./apps.js";
import { startChat } from "./chat.js";
import { startDocuments } from "./documents.js";
import { startLists } from "./lists.js";
import { startMemories } from "./memories.js";
import { startNotifications } from "./notifications.js";
import { startLayout } from "./page.js";
import { startSettings } from "./settings.js";
import { resume, startSignIn } from "./signin.js";
import { startTasks } from "./tasks.js";

startLayout();
startSignIn();
startChat();
startTasks();
startDocuments();
startLists();
startSettings();
startApps();
startMemories();
startNotifications();
resume();
