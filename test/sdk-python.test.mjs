// The cross-SDK conformance suite (test/sdks/suite.mjs) against the python SDK's services.
import t from 'tap';
import { conformance } from './sdks/suite.mjs';

conformance(t, 'python');
