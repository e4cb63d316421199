import type { Command } from 'commander';
import { serveCommand } from './serve.js';
import { engineCommand } from './engine.js';
import { compareCommand } from './compare.js';
import { demoCommand } from './demo.js';
import { analyzeCommand } from './analyze.js';
import { replayCommand } from './replay.js';
import { recordCommand } from './record.js';
import { probeCommand } from './probe.js';
import { canaryCommand } from './canary.js';

/** A command factory: builds the commander Command; `setExit` records the exit code. */
export type CommandFactory = (setExit: (code: number) => void) => Command;

/** Every subcommand of `logprobe`, in help order. */
export const commands: CommandFactory[] = [
  serveCommand,
  compareCommand,
  analyzeCommand,
  replayCommand,
  recordCommand,
  probeCommand,
  canaryCommand,
  demoCommand,
  engineCommand,
];
