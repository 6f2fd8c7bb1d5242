import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Apache Kafka's own Java producer with its default partitioner, as the console producer, Kafka Streams,
 * Connect and Spring use it. Reads "KEY<TAB>PAYLOAD" lines from stdin (an empty KEY sends no key),
 * publishes each to TOPIC and prints "KEY<TAB>PARTITION".
 *
 * Run: java -cp "$(deploy/local/kafka.sh classpath)" tests/java/KeyedProducer.java BROKERS TOPIC
 */
public class KeyedProducer {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        props.put("acks", "all");
        String topic = args[1];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            String line;
            while ((line = in.readLine()) != null) {
                int tab = line.indexOf('\t');
                String key = line.substring(0, tab);
                String payload = line.substring(tab + 1);
                ProducerRecord<String, String> record =
                    new ProducerRecord<>(topic, key.isEmpty() ? null : key, payload);
                RecordMetadata sent = producer.send(record).get();
                System.out.println(key + "\t" + sent.partition());
            }
        }
    }
}
