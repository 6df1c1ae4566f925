/*
 * kmock: a librdkafka mock Kafka cluster driven through stdin, for Keel's tests.
 *
 *   kmock BROKERS        prints "BOOTSTRAP host:port,..." then reads commands, one a line:
 *     topic NAME PARTITIONS        create a topic (replication factor 1)
 *     down BROKER_ID | up BROKER_ID   close the broker's connections and refuse new ones / accept again
 *     err APIKEY ERRCODE COUNT     the next COUNT requests of APIKEY fail with ERRCODE
 *     topicerr NAME ERRCODE        metadata answers ERRCODE for the topic (3: unknown topic; 0 clears)
 *   and answers "ok" or "error <reason>" to each. EOF on stdin destroys the cluster and exits.
 *
 * Built by test/helpers/kafka.mjs with `cc -O2 -o kmock kmock.c -lrdkafka` (Debian: librdkafka-dev).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

int main(int argc, char **argv) {
  char errstr[512];
  int brokers = argc > 1 ? atoi(argv[1]) : 1;
  if (brokers < 1) brokers = 1;
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  /* The handle only hosts the cluster's thread; keep its own logging quiet. */
  rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (!rk) {
    fprintf(stderr, "kmock: rd_kafka_new: %s\n", errstr);
    return 1;
  }
  rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
  if (!mc) {
    fprintf(stderr, "kmock: rd_kafka_mock_cluster_new failed\n");
    return 1;
  }
  printf("BOOTSTRAP %s\n", rd_kafka_mock_cluster_bootstraps(mc));
  fflush(stdout);

  char line[1024], a[512];
  while (fgets(line, sizeof line, stdin)) {
    int n = 0, m = 0, k = 0;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (sscanf(line, "topic %511s %d", a, &n) == 2) {
      err = rd_kafka_mock_topic_create(mc, a, n, 1);
    } else if (sscanf(line, "topicerr %511s %d", a, &n) == 2) {
      rd_kafka_mock_topic_set_error(mc, a, (rd_kafka_resp_err_t)n);
    } else if (sscanf(line, "down %d", &n) == 1) {
      err = rd_kafka_mock_broker_set_down(mc, n);
    } else if (sscanf(line, "up %d", &n) == 1) {
      err = rd_kafka_mock_broker_set_up(mc, n);
    } else if (sscanf(line, "err %d %d %d", &n, &m, &k) == 3) {
      for (int i = 0; i < k; i++) rd_kafka_mock_push_request_errors(mc, (int16_t)n, 1, (rd_kafka_resp_err_t)m);
    } else {
      printf("error unknown command: %s", line);
      fflush(stdout);
      continue;
    }
    if (err) printf("error %s\n", rd_kafka_err2str(err));
    else printf("ok\n");
    fflush(stdout);
  }
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return 0;
}
