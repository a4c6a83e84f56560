// An unmodified agent: it uses the official `openai` SDK and knows nothing of runguard. Wrapped in
// `runguard exec`, the SDK reads OPENAI_BASE_URL (set by exec to the run's proxy URL), so every call
// is checked before it is sent and recorded with its tokens and cost.
//
//   npx runguard exec --user alice -- node examples/openai-agent.mjs "What is runguard?"
import OpenAI from 'openai';

const question = process.argv[2] ?? 'Say hello in five words.';
const model = process.env.AGENT_MODEL ?? 'gpt-4o-mini';
const openai = new OpenAI(); // OPENAI_API_KEY, OPENAI_BASE_URL

try {
  const reply = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: question }] });
  console.log(reply.choices[0].message.content);

  // Streams pass through runguard chunk by chunk; their usage is counted too.
  const stream = await openai.chat.completions.create({
    model,
    stream: true,
    messages: [{ role: 'user', content: 'Now say it again, streamed.' }],
  });
  for await (const chunk of stream) process.stdout.write(chunk.choices[0]?.delta?.content ?? '');
  process.stdout.write('\n');
} catch (error) {
  // A call runguard denies is a 403 in OpenAI's own format: the SDK raises PermissionDeniedError
  // and does not retry. Its code is the deny reason (USER_BLOCKED, KILL_SWITCH_ACTIVE, ...).
  if (error instanceof OpenAI.PermissionDeniedError) {
    console.error(`denied by runguard: ${error.code}: ${error.message}`);
    process.exit(3);
  }
  throw error;
}
