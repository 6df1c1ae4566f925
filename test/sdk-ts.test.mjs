// The cross-SDK conformance suite (test/sdks/suite.mjs) against the ts SDK's services.
import t from 'tap';
import { conformance } from './sdks/suite.mjs';

conformance(t, 'ts');
