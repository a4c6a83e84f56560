/**
 * A daemon process whose Postgres is a cluster of its own, so a test may stop and start it, with
 * OpenAI proxied to a fake upstream: the set-up of the outage tests.
 */
import { startDaemonProcess, type DaemonProcess } from './daemon-process.js';
import { startFakeUpstream, type FakeUpstream } from './fake-upstream.js';
import { startPrivatePostgres, type PrivatePostgres } from './private-services.js';

export interface DaemonOnPrivatePostgres {
  cluster: PrivatePostgres;
  upstream: FakeUpstream;
  daemon: DaemonProcess;
  /** Stops the daemon, then the upstream and the cluster. */
  close(): Promise<void>;
}

export async function startDaemonOnPrivatePostgres(): Promise<DaemonOnPrivatePostgres> {
  const [cluster, upstream] = await Promise.all([startPrivatePostgres(), startFakeUpstream()]);
  const closeServices = async () => {
    await upstream.close();
    await cluster.close();
  };
  let daemon: DaemonProcess;
  try {
    // A small pool: what the outage tests watch is the pool losing and replacing its connections.
    daemon = await startDaemonProcess({
      databaseUrl: cluster.url,
      env: { RUNGUARD_OPENAI_UPSTREAM: upstream.url, RUNGUARD_DB_POOL_SIZE: '5' },
    });
  } catch (error) {
    await closeServices();
    throw error;
  }
  return {
    cluster,
    upstream,
    daemon,
    async close() {
      await daemon.close();
      await closeServices();
    },
  };
}
