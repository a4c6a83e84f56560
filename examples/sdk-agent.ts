/**
 * A TypeScript agent guarded with the runguard SDK: one run for the user, a model call and a tool
 * call as its steps, each checked before it runs and recorded with its tokens and cost.
 *
 *   export RUNGUARD_API_KEY="$(cat .runguard/api-key)"   # the key the daemon wrote on its first start
 *   export OPENAI_API_KEY=sk-...                         # the model call goes to OpenAI directly
 *   npx tsx --tsconfig examples/tsconfig.json examples/sdk-agent.ts "What is runguard?"
 *
 * In this checkout, examples/tsconfig.json maps `@runguard/client` to the package's source
 * (clients/typescript/src). In an agent project of your own, install the
 * package (until it is published, from a runguard checkout: `npm pack` in clients/typescript, then
 * `npm install /path/to/runguard-client-0.1.0.tgz` there).
 */
import OpenAI from 'openai';
import { extractors, GuardBlockedError, GuardClient } from '@runguard/client';

const question = process.argv[2] ?? 'What does a guardrail sidecar do?';
const model = process.env.AGENT_MODEL ?? 'gpt-4o-mini';

/** The agent's tool: a stand-in for a real search, so the example runs anywhere. */
async function search(query: string): Promise<string[]> {
  return [`https://example.com/search?q=${encodeURIComponent(query)}`];
}

const openai = new OpenAI(); // OPENAI_API_KEY, OPENAI_BASE_URL
const guard = new GuardClient(); // RUNGUARD_API_KEY, RUNGUARD_URL (default http://127.0.0.1:8787)

try {
  const answer = await guard.run(
    'user-123',
    async (run) => {
      const reply = await run.modelCall(
        () => openai.chat.completions.create({ model, messages: [{ role: 'user', content: question }] }),
        { model, inputData: { question }, tokenExtractor: extractors.openai },
      );
      const text = reply.choices[0]?.message.content ?? '';
      const links = await run.toolCall(() => search(text), { toolName: 'search', inputData: { query: text } });
      return { text, links, runId: run.id };
    },
    { metadata: { example: 'sdk-agent' } },
  );
  console.log(`run ${answer.runId}: ${answer.text} (${answer.links.length} link)`);
} catch (error) {
  if (!(error instanceof GuardBlockedError)) throw error;
  // Denied before the call was made: nothing was sent to the model.
  console.error(`blocked: ${error.denyReason}: ${error.reason}`);
  process.exitCode = 3;
} finally {
  await guard.close();
}
