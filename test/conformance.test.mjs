// The sdk-test-suite scenarios (restatedev/sdk-test-suite, test/services/conformance-suite.mjs)
// against a real Keel process with real SDK services, each in the default mode and with the
// inactivity timeout at 0 (every await point suspends, like Restate's alwaysSuspending suite):
// sleeps, run flush and retries, state, user errors, non-determinism, kill.
import t from 'tap';
import { startKeel, register } from './helpers/keel.mjs';
import { conformanceServices } from './services/conformance-services.mjs';
import { lockObj } from './services/cancel-services.mjs';
import { serveDroppable, FAST_RETRY, ALWAYS_SUSPEND } from './services/invocation-helpers.mjs';
import { conformanceSuite } from './services/conformance-suite.mjs';

const MODES = [
  ['default', {}],
  ['always-suspending', ALWAYS_SUSPEND],
];

for (const [mode, modeEnv] of MODES) {
  t.test(`conformance (${mode})`, async (t) => {
    const keel = await startKeel(t, {
      env: { KEEL_WORKER__PARTITIONS: '4', ...FAST_RETRY, KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '5', ...modeEnv },
    });
    const endpoint = await serveDroppable(t, [...conformanceServices, lockObj]);
    await register(keel, endpoint.uri);
    conformanceSuite(t, keel, endpoint, { suspends: mode === 'always-suspending' });
  });
}
