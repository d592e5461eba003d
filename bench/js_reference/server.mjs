// The official JavaScript SDK's server for bench/side_by_side.py: @a2a-js/sdk's
// DefaultRequestHandler and InMemoryTaskStore behind its Express JSON-RPC middleware at `/`, one
// process, with an executor that emits what bench/reference_server.py's does (and what our
// `LLM_MODEL=scripted` does): the task (submitted), a working status, SCRIPTED_CHUNKS artifact
// chunks of 20 characters ("answer", appended after the first, lastChunk on the last),
// SCRIPTED_DELAY_MS apart, and completed.
//
//     (cd bench/js_reference && npm ci) && node bench/js_reference/server.mjs --port 9300
import express from 'express';
import { TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express';

const portAt = process.argv.indexOf('--port');
const port = portAt > 0 ? Number(process.argv[portAt + 1]) : 9300;
const chunkCount = Number(process.env.SCRIPTED_CHUNKS ?? '20');
const delayMs = Number(process.env.SCRIPTED_DELAY_MS ?? '0');
// scripted_chunk(index) of agent/llm/scripted.py: `chunk 0001 ` padded with dots to 20 characters.
const chunks = Array.from({ length: chunkCount }, (_, index) =>
  `chunk ${String(index).padStart(4, '0')} `.padEnd(20, '.'),
);

const status = (state) => ({ state, message: undefined, timestamp: new Date().toISOString() });

class ScriptedExecutor {
  async execute(context, bus) {
    const { taskId, contextId } = context;
    if (context.task === undefined) {
      bus.publish(AgentEvent.task({
        id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED },
        artifacts: [], history: [context.userMessage], metadata: undefined,
      }));
    } else {
      // The SDK wants a task or a message first on every turn, a follow-up too.
      bus.publish(AgentEvent.task(context.task));
    }
    bus.publish(AgentEvent.statusUpdate({
      taskId, contextId, status: status(TaskState.TASK_STATE_WORKING), metadata: undefined,
    }));
    for (const [index, text] of chunks.entries()) {
      if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
      bus.publish(AgentEvent.artifactUpdate({
        taskId, contextId, append: index > 0, lastChunk: index === chunks.length - 1,
        artifact: {
          artifactId: 'answer', name: 'answer', description: '', extensions: [],
          parts: [{ content: { $case: 'text', value: text }, metadata: undefined,
            filename: '', mediaType: '' }],
          metadata: undefined,
        },
        metadata: undefined,
      }));
    }
    bus.publish(AgentEvent.statusUpdate({
      taskId, contextId, status: status(TaskState.TASK_STATE_COMPLETED), metadata: undefined,
    }));
    bus.finished();
  }

  async cancelTask(taskId, bus) {
    bus.publish(AgentEvent.statusUpdate({
      taskId, contextId: '', status: status(TaskState.TASK_STATE_CANCELED), metadata: undefined,
    }));
    bus.finished();
  }
}

const card = {
  name: 'reference-js',
  description: '@a2a-js/sdk server with a scripted executor',
  version: '1.0',
  supportedInterfaces: [{
    url: `http://127.0.0.1:${port}/`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0',
  }],
  provider: undefined,
  capabilities: { streaming: true, pushNotifications: false, extensions: [] },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain'],
  skills: [{
    id: 'scripted', name: 'scripted', description: 'a fixed answer', tags: ['bench'],
    examples: [], inputModes: [], outputModes: [], securityRequirements: [],
  }],
  signatures: [],
};

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new ScriptedExecutor());
const app = express();
app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
app.use('/', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
app.listen(port, '127.0.0.1');
