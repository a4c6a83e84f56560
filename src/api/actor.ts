/** Who made a change, as events name them: the API key's id or the dashboard account's. */
import type { Actor } from '../webhooks/webhook-events.js';
import type { Principal } from './auth.js';

export const actorOf = (principal: Principal): Actor => ({
  type: principal.kind === 'jwt' ? 'account' : 'api_key',
  id: principal.subjectId,
});
